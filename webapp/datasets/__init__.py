"""Datasets (floor 5): episodes routed into versions. Datasets and immutable versions, the flywheel round
(`rounds.py`: verified-good to SFT, the rest to continual pre-training), exports and withdrawals.

Owns: Dataset, DatasetVersion, DatasetMembership, FlywheelIteration, DatasetExport, VersionWithdrawal.
Calls: episodes, reviews, policies.
Called by: training (a run's pinned version), dashboards.
"""
