"""Reviews (floor 4): people judging episodes. Review assignments, decisions (accept, reject, send
back), step labels and agreement between reviewers, and the trajectory views (`trajectories.py`: an
episode's steps with the labels and corrections of the review that decides it) that the flywheel round,
exports and training data read.

Owns: Review, ReviewEvent, StepLabel.
Calls: episodes.
Called by: annotation (send-backs on the queue), datasets (what is verified, trajectory views), training,
dashboards.
"""
