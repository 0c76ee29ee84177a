# Session 2, call 4 (2 H200s, fresh machine): PPO resume equality at Huginn-0125 shapes, Ray placing trainer and
# engine on two GPUs, NCCL publications (the call-3 attempt ran past its own `timeout`s; these are longer).
source benchmarks/gpu/setup.sh
timeout 150 python3 benchmarks/gpu/make_checkpoints.py full
bash benchmarks/gpu/resume_runs.sh ppo
