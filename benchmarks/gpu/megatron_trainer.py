"""The Megatron-core trainer (looprl.training.megatron_trainer) on one GPU against the torch backend's, one JSON file:
  steps    a mid-size Huginn (as make_checkpoints.py mid) in FP16 with loss scale 128, GRPO and PPO (SGD, lr 1e-4): the
           publication digest of both backends before training (same weights: must be equal), then 3 updates of each
           backend from the same synthetic rollouts (8 completions in groups of 4, mixed rewards): per update the loss,
           gradient norms and skipped steps of both, and the largest relative difference of any published tensor;
  resume   the Megatron trainer's own exactness: 3 updates uninterrupted against 2 updates, its state saved and
           loaded as a run checkpoint's trainer.pt (looprl.core.state), by a fresh trainer in this process, then update 3 — publication digests and metrics
           compared; and the twins that must differ: the same resume with LOOPRL_SKIP_RESTORE=master, and with =actor.
  checkpoint  the same resume through the run checkpoint's own path, MegatronTrainer.save / load (dist_checkpointing
           into megatron/, the counters and RNG in trainer.pt), with AdamW (lr 1e-5, moments to restore), with Megatron's
           plain FP16 optimizer and with its distributed optimizer; the twins LOOPRL_SKIP_RESTORE=optimizer, =actor (and
           =master for the plain optimizer); the files written and the save and load seconds.
usage: PYTHONPATH=. python benchmarks/gpu/megatron_trainer.py [steps] [resume] [checkpoint]   -> $OUT/megatron-trainer.json
Each part records its error text instead of its figures when it fails; the others still run."""
import json, os, shlex, sys, tempfile, time, traceback
from pathlib import Path

PARTS = ("steps", "resume", "checkpoint")
DEVICE = "cuda"
T0 = time.perf_counter()
OUT = Path(os.environ.get("OUT", "out")); OUT.mkdir(parents=True, exist_ok=True)
PATH = OUT / "megatron-trainer.json"
DOC = {"command": shlex.join(["python", *sys.argv]), "script": os.environ.get("LOOPRL_SCRIPT"), "parts": {}}


def mid_config():
    from looprl.model.config import tiny_config
    return tiny_config("huginn_raven", n_embd=1024, n_heads=8, head_dim=128, num_key_value_heads=8, intermediate_size=2816,
                       vocab_size=32768, padded_vocab_size=32768, block_size=1024, mean_recurrence=8)


def settings(algorithm):
    from looprl.training.settings import TrainSettings
    return TrainSettings(algorithm=algorithm, precision="fp16", optimizer="sgd", lr=1e-4, micro_batch_size=4, loss_scale=128.0)


def natives(cfg, algorithm):
    "The native start of a run, as trainer.build_trainer makes it: the actor, and the critic with its value head zeroed."
    import torch
    from looprl.model.models import build_model, init_weights
    actor = init_weights(build_model(cfg), seed=1, perturb_norms=True)
    critic = None
    if algorithm != "grpo":
        critic = build_model(cfg, "critic")
        critic.load_state_dict({n: t for n, t in actor.state_dict().items() if n in critic.state_dict()}, strict=False)
        with torch.no_grad(): critic.value_head.weight.zero_()
    return actor, critic


def trainer(backend, cfg, algorithm, **changes):
    import dataclasses
    from looprl.training.trainer import Trainer
    from looprl.training.megatron_trainer import MegatronTrainer
    s = dataclasses.replace(settings(algorithm), backend=backend, **changes)
    a, c = natives(cfg, algorithm)
    return (MegatronTrainer if backend == "megatron" else Trainer)(a, c, s, DEVICE)


def rollouts(cfg, n=3):
    import dataclasses
    from looprl.bench.train import _synthetic_rollout
    out = []
    for u in range(n):
        r = _synthetic_rollout(cfg.vocab_size, 8, 48, 16)
        out.append(dataclasses.replace(r, rewards=[float((i + u) % 3 == 0) for i in range(8)]))     # mixed in every group of 4
    return out


KEYS = ("loss", "grad_norm", "skipped", "value_loss", "critic_grad_norm", "parity_max")


def steps():
    import torch
    cfg, out = mid_config(), {}
    for alg in ("grpo", "ppo"):
        t, m = trainer("torch", cfg, alg), trainer("megatron", cfg, alg)
        (tp, td), (mp, md) = t.publication(), m.publication()
        rows = [dict(update="start", digests_equal=td == md, torch_digest=td, megatron_digest=md)]
        for u, r in enumerate(rollouts(cfg)):
            a, b = t.train(r, 4)["metrics"], m.train(r, 4)["metrics"]
            (tp, td), (mp, md) = t.publication(), m.publication()
            rel = max(((mp[n].float() - x.float()).abs().max() / x.float().abs().max().clamp_min(1e-30)).item() for n, x in tp.items() if x.is_floating_point())
            rows.append(dict(update=u, torch={k: a.get(k) for k in KEYS}, megatron={k: b.get(k) for k in KEYS}, max_rel_d_published=rel))
        out[alg] = rows
        del t, m; torch.cuda.empty_cache()
    return out


def resume():
    import torch
    cfg, out = mid_config(), {}
    rs = rollouts(cfg)
    for alg in ("grpo", "ppo"):
        a = trainer("megatron", cfg, alg)
        straight, digests = [], []
        for r in rs: straight.append(a.train(r, 4)["metrics"]); digests.append(a.publication()[1])
        want = digests[-1]
        del a; torch.cuda.empty_cache()
        b = trainer("megatron", cfg, alg)
        for r in rs[:2]: b.train(r, 4)
        from looprl.core.state import save_trainer_state, load_trainer_state
        path = Path(tempfile.mkdtemp())
        save_trainer_state(b.state_dict(), path)          # the run checkpoint's trainer.pt, as the loop writes it
        del b; torch.cuda.empty_cache()
        row = {}
        for skip in ("", "master", "actor"):
            os.environ["LOOPRL_SKIP_RESTORE"] = skip
            try:
                c = trainer("megatron", cfg, alg)
                c.load_state_dict(load_trainer_state(path, restore=False))
                m3 = c.train(rs[2], 4)["metrics"]
                got = c.publication()[1]
            finally: os.environ.pop("LOOPRL_SKIP_RESTORE", None)
            row[skip or "restored"] = dict(digest_equal=got == want, metrics_equal=all(m3.get(k) == straight[2].get(k) for k in KEYS),
                                           grad_norm=[straight[2].get("grad_norm"), m3.get("grad_norm")])
            del c; torch.cuda.empty_cache()
        row["digests_change_every_update"] = len(set(digests)) == len(digests)
        row["straight_grad_norms"] = [x.get("grad_norm") for x in straight]
        out[alg] = row
        (path / "trainer.pt").unlink(); path.rmdir()
    return out


def checkpoint():
    import shutil, torch
    cfg, out = mid_config(), {}
    rs = rollouts(cfg)
    for alg in ("grpo", "ppo"):
        for distributed in (False, True):
            kw = dict(optimizer="adamw", lr=1e-5, distributed_optimizer=distributed)
            a = trainer("megatron", cfg, alg, **kw)
            straight, digests = [], []
            for r in rs: straight.append(a.train(r, 4)["metrics"]); digests.append(a.publication()[1])
            want = digests[-1]
            del a; torch.cuda.empty_cache()
            b = trainer("megatron", cfg, alg, **kw)
            for r in rs[:2]: b.train(r, 4)
            path = Path(tempfile.mkdtemp())
            t = time.perf_counter(); b.save(path); save_s = time.perf_counter() - t
            files = sorted(str(f.relative_to(path)) for f in path.rglob("*") if f.is_file())
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            del b; torch.cuda.empty_cache()
            row = dict(files=files, bytes=size, save_s=round(save_s, 2))
            for skip in ("", "optimizer", "actor") + (() if distributed else ("master",)):
                os.environ["LOOPRL_SKIP_RESTORE"] = skip
                try:
                    c = trainer("megatron", cfg, alg, **kw)
                    t = time.perf_counter(); c.load(path); load_s = time.perf_counter() - t
                    m3 = c.train(rs[2], 4)["metrics"]
                    got = c.publication()[1]
                finally: os.environ.pop("LOOPRL_SKIP_RESTORE", None)
                row[skip or "restored"] = dict(digest_equal=got == want, metrics_equal=all(m3.get(k) == straight[2].get(k) for k in KEYS),
                                               grad_norm=[straight[2].get("grad_norm"), m3.get("grad_norm")], load_s=round(load_s, 2))
                del c; torch.cuda.empty_cache()
            row["digests_change_every_update"] = len(set(digests)) == len(digests)
            row["straight_grad_norms"] = [x.get("grad_norm") for x in straight]
            out[f"{alg}-{'distributed' if distributed else 'plain'}-optimizer"] = row
            shutil.rmtree(path)
    return out


def main(argv):
    import torch
    want = argv or list(PARTS)
    bad = [p for p in want if p not in PARTS]
    if bad: sys.exit(f"megatron_trainer.py: unknown part {bad[0]!r} (known: {', '.join(PARTS)})")
    import megatron.core
    from looprl.bench import environment
    DOC.update(environment=environment(), megatron_core=megatron.core.__version__)
    for name in want:
        t = time.perf_counter()
        try: DOC["parts"][name] = {"result": globals()[name](), "seconds": round(time.perf_counter() - t, 1)}
        except Exception: DOC["parts"][name] = {"error": traceback.format_exc()[-6000:], "seconds": round(time.perf_counter() - t, 1)}
        torch.cuda.empty_cache()
        print(name, json.dumps(DOC["parts"][name])[:3000], flush=True)
        DOC["seconds"] = round(time.perf_counter() - T0, 1); PATH.write_text(json.dumps(DOC, indent=1))
    return 0 if all("error" not in p for p in DOC["parts"].values()) else 1


if __name__ == "__main__": sys.exit(main(sys.argv[1:]))
