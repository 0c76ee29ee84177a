# Two H200s: PPO resume equality at Huginn-0125 shapes, Ray placing trainer and engine on two GPUs, NCCL
# publications; each process has a time limit that fits a 27 GB checkpoint.
source benchmarks/gpu/setup.sh
timeout 150 python3 benchmarks/gpu/make_checkpoints.py full
bash benchmarks/gpu/resume_runs.sh ppo
