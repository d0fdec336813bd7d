"""Reviews (floor 4): people judging episodes. Review assignments, decisions (accept, reject, send
back), step labels and agreement between reviewers.

Owns: Review, ReviewEvent, StepLabel.
Calls: episodes.
Called by: annotation (send-backs on the queue), datasets (what is verified), training, dashboards.
"""
