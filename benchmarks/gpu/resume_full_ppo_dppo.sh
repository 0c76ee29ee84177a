# Two H200s (with /tmp/h0125 from kernels_digest_publication.sh): resume equality at Huginn-0125 shapes for PPO and DPPO.
source benchmarks/gpu/setup.sh
[ -d /tmp/h0125 ] || timeout 120 python3 benchmarks/gpu/make_checkpoints.py full
SECONDS=0
bash benchmarks/gpu/resume_runs.sh ppo
echo "ppo done after $SECONDS s"
[ $SECONDS -lt 280 ] && bash benchmarks/gpu/resume_runs.sh dppo
echo "done after $SECONDS s"
