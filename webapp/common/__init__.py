"""Pieces every app uses: storage, live broadcast, access checks."""
