"""Data: what episodes leave behind, and the datasets made from it.

Owns: steps and outcomes (`trajectory`), a demonstrator's raw input merged into actions (`recording`),
dataset record formats (`export_formats`; SFT laid out for TRL, LLaMA-Factory and ms-swift in
`sft_layouts`) and streaming exports (`export`). Calls agent_core.actions,
env, flywheel, prompts, thoughts and tasks. Called by the agent loop, policies, memory, training and
webapp (annotation, rollouts, episodes, datasets).
"""
