"Larger matrices, fuzzing, threads, the CPU-time bound, refusals and pluggable rewards for `looprl.tasks.rewards`."
import hashlib, json, random, signal, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest

import looprl.tasks.rewards as rewards
from looprl.tasks.rewards import (REWARD_STATUSES, RewardResult, even_token_share, math_reward, math_reward_detail, too_costly,
                                warm_up)
from looprl.tasks.answers import DEFAULT_TIMEOUT_S, MAX_RESPONSE_CHARS, extract_answer, read_answer
from looprl.core.deadline import AnswerTimeout, deadline
from looprl.tasks.reward_specs import DEFAULT_REWARD, RewardError, load_reward, reward_identity, score_completion

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up()


def forms(q: Fraction) -> list[str]:
    "Several ways a model may write the rational q."
    p, d = q.numerator, q.denominator
    sign, ap = ("-" if p < 0 else ""), abs(p)
    out = [rf"{sign}\frac{{{ap}}}{{{d}}}", rf"{sign}\dfrac{{{ap}}}{{{d}}}", f"{p}/{d}"] if d != 1 else [str(p), f"{p}.0", f"{p:,}"]
    if d != 1 and all(f in (2, 5) for f in _factors(d)):                  # terminating decimal
        out.append(f"{float(q):.10f}".rstrip("0"))
    return out


def _factors(n):
    f, k = [], 2
    while n > 1:
        while n % k == 0: f.append(k); n //= k
        k += 1
    return f


NUMBERS = [Fraction(1, 2), Fraction(-3, 4), Fraction(7, 8), Fraction(2, 3), Fraction(5), Fraction(-12), Fraction(1234567), Fraction(22, 7)]


@pytest.mark.parametrize("q", NUMBERS, ids=str)
def test_every_form_matches_every_form(q):
    fs = forms(q)
    for a in fs:
        for b in fs:
            assert math_reward(rf"\boxed{{{a}}}", b) == 1.0, (a, b)


@pytest.mark.parametrize("q", NUMBERS, ids=str)
def test_forms_of_other_numbers_do_not_match(q):
    for other in NUMBERS:
        if other == q: continue
        for a in forms(other)[:2]:
            assert math_reward(rf"The answer is ${a}$.", forms(q)[0]) == 0.0, (a, q)


def test_thousands_separators_random_integers():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randrange(-10**12, 10**12)
        assert math_reward(f"#### {n:,}", str(n)) == 1.0
        assert math_reward(f"So the total is {n:,} dollars.", str(n + 1)) == 0.0
        assert math_reward(rf"\boxed{{{n:,}}}".replace(",", "{,}"), f"{n:,}") == 1.0


def test_extraction_priority():
    text = r"Answer: 3. Actually 4. The answer is 5. \boxed{6} and 7"
    assert extract_answer(text) == "6"
    assert read_answer(r"Answer: 3. The answer is 5, and 7 more") == (None, "refused:several")    # two phrases, two answers
    assert extract_answer(r"The answer is 5, and 7 more") == "5"                # a phrase outranks the other numbers
    assert extract_answer("x" * (MAX_RESPONSE_CHARS + 10) + "#### 9") == "9"
    assert extract_answer("#### 9" + "x" * MAX_RESPONSE_CHARS) is None        # outside the searched tail


GARBAGE_TOKENS = [r"\boxed{", "{", "}", r"\frac", "^", "**", "!", "(", ")", "$", "9", "1,000", r"\sqrt", "x", "=", r"\{", r"\}",
                  "The answer is", "####", "Answer:", ".", "-", "%", r"\%", r"\left(", r"\right)", r"\sum", "\n", "\x00", "é", "∞"]


def test_fuzz_never_raises_and_is_bounded():
    rng = random.Random(1)
    slowest = 0.0
    for _ in range(400):
        resp = "".join(rng.choice(GARBAGE_TOKENS) for _ in range(rng.randrange(0, 60)))
        label = "".join(rng.choice(GARBAGE_TOKENS) for _ in range(rng.randrange(0, 6)))
        t = time.perf_counter()
        r = math_reward_detail(resp, label)
        slowest = max(slowest, time.perf_counter() - t)
        assert r.value in (0.0, 1.0) and type(r.value) is float
        assert r.status in REWARD_STATUSES and r.status != "error", (resp, label, r)
    assert slowest < 1.0, slowest


@pytest.mark.parametrize("resp,label", [(b"\\boxed{1}", "1"), (["1"], "1"), ({"a": 1}, "1"), (1.0, "1"), (r"\boxed{1}", b"1"),
                                        (r"\boxed{1}", True), (r"\boxed{1}", ["1"]), (r"\boxed{1}", object()),
                                        (r"\boxed{1}", float("nan")), ("\ud800", "1")])
def test_non_str_inputs_score_zero(resp, label):
    assert math_reward(resp, label) == 0.0
    assert math_reward_detail(resp, label).status in ("bad_input", "no_answer", "wrong")


def test_numeric_labels():
    assert math_reward(r"\boxed{0.25}", 0.25) == 1.0
    assert math_reward(r"\boxed{\frac{1}{3}}", Fraction(1, 3)) == 1.0
    assert math_reward(r"\boxed{7}", 7) == 1.0


def test_huge_label_scores_zero_quickly():
    t = time.perf_counter()
    assert math_reward(r"\boxed{1}", "1" * (MAX_RESPONSE_CHARS + 1)) == 0.0
    assert time.perf_counter() - t < 0.5


SLOW = r"\boxed{(x+1)^{30}(y+1)^{30}(z+1)^{30}}"       # passes the screen; SymPy needs more than 30 s of CPU time


def test_slow_expression_passes_the_screen():
    assert too_costly(SLOW[len("\\boxed{"):-1]) is None
    assert "expands to 1891 terms" in too_costly("(x+y+z)^{60}")          # a single power that large is screened


def test_deadline_main_thread_and_state_restored():
    calls = []
    def mine(signum, frame): calls.append(signum)
    old = signal.signal(signal.SIGALRM, mine)
    try:
        t = time.perf_counter()
        assert math_reward_detail(SLOW, "1", timeout_s=0.3)[:2] == (0.0, "timeout")
        assert time.perf_counter() - t < 1.0
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert calls == []


def test_outer_timer_is_left_alone():
    "The deadline uses no signals: a timer armed by the caller keeps running and its handler is not called early."
    fired = []
    old = signal.signal(signal.SIGALRM, lambda s, f: fired.append(time.perf_counter()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        t = time.perf_counter()
        assert math_reward_detail(SLOW, "1", timeout_s=0.3)[:2] == (0.0, "timeout")
        assert time.perf_counter() - t < 2.0
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0 < remaining < 5.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0); signal.signal(signal.SIGALRM, old)
    assert fired == []


def test_deadline_in_worker_thread():
    out = {}
    def work():
        c = time.thread_time(); t = time.perf_counter()
        out["r"] = math_reward_detail(SLOW, "1", timeout_s=0.3).value
        out["cpu"], out["wall"] = time.thread_time() - c, time.perf_counter() - t
        out["trace"] = sys.gettrace()
    th = threading.Thread(target=work, daemon=True); th.start(); th.join(30)
    assert not th.is_alive()
    assert out["r"] == 0.0 and out["cpu"] < 1.0 and out["wall"] < 3.0, out
    assert out["trace"] is None


def test_deadline_keeps_a_foreign_tracer_in_a_thread():
    seen = {}
    def foreign(frame, event, arg): return None
    def work():
        sys.settrace(foreign)
        seen["r"] = math_reward(r"\boxed{\frac{\sqrt{3}}{2}}", r"\sin(\pi/3)")
        seen["after"] = sys.gettrace()
        sys.settrace(None)
    th = threading.Thread(target=work, daemon=True); th.start(); th.join(30)
    assert seen == {"r": 1.0, "after": foreign}


def test_traced_threads_run_after_timeouts():
    """Regression: cancelling a pending async exception (SetAsyncExc(NULL)) leaves CPython 3.11's eval-breaker
    flag on, and the next traced thread then spins forever at its first function call."""
    def spin():
        while True: (lambda: None)()
    def timed_out():
        try:
            with deadline(0.05): spin()
        except AnswerTimeout: pass
    def finish_in_time():
        with deadline(5.0): sum(range(100))
    out = []
    def traced():
        sys.settrace(lambda f, e, a: None)
        try: out.append(math_reward(r"\boxed{\frac{\sqrt{3}}{2}}", r"\sin(\pi/3)"))
        finally: sys.settrace(None)
    for target in (timed_out, finish_in_time, timed_out, traced):
        th = threading.Thread(target=target, daemon=True); th.start(); th.join(20)
        assert not th.is_alive(), target.__name__
    assert out == [1.0]


def test_concurrent_timeouts_all_land():
    "Four threads past their budget at once: each gets its exception (the pending flag is shared between threads)."
    def spin():
        while True: (lambda: None)()
    def one(_):
        t = time.perf_counter()
        try:
            with deadline(0.05): spin()
        except AnswerTimeout: return time.perf_counter() - t
    with ThreadPoolExecutor(4) as ex:
        for _ in range(5):
            took = list(ex.map(one, range(4)))
            assert all(t is not None and t < 1.5 for t in took), took


def test_timeouts_never_escape_the_deadline_block():
    "A timeout landing as the block ends is cancelled; code after the block never sees it."
    def busy(n):
        x = 0
        for i in range(n): x += i
        return x
    def worker(seed):
        rng, escaped, fired = random.Random(seed), 0, 0
        for _ in range(150):
            try:
                try:
                    with deadline(0.004): busy(rng.randrange(0, 250_000))     # 0 to about 9 ms of CPU time
                except AnswerTimeout: fired += 1
                busy(20_000)                                  # plenty of bytecodes for a stray exception to land
            except AnswerTimeout: escaped += 1
        return escaped, fired
    with ThreadPoolExecutor(4) as ex: res = list(ex.map(worker, range(4)))
    assert sum(e for e, _ in res) == 0, res
    assert sum(f for _, f in res) > 0, res                  # the deadline did fire along the way


def test_deadline_context_interrupts_python_loops():
    def spin():
        while True: (lambda: None)()
    for runner in (lambda f: f(), lambda f: (th := threading.Thread(target=f), th.start(), th.join(10))):
        box = []
        def body():
            t = time.perf_counter()
            try:
                with deadline(0.1): spin()
            except AnswerTimeout: box.append(time.perf_counter() - t)
        runner(body)
        assert len(box) == 1 and box[0] < 0.6, box


def test_math_verify_defaults_fail_in_threads_but_math_reward_does_not():
    "The problem this module works around, and the fix."
    from math_verify import parse
    errors, rewards = [], []
    def work():
        try: parse(r"\boxed{\frac{1}{2}}")                       # math-verify's default: signal-based timeout
        except ValueError as e: errors.append(str(e))
        rewards.append(math_reward(r"\boxed{\frac{1}{2}}", "0.5"))
    th = threading.Thread(target=work, daemon=True); th.start(); th.join(30)
    assert errors and "thread" in errors[0]
    assert rewards == [1.0]


CASES = [(r"\boxed{\frac{1}{2}}", "0.5", 1.0), (r"\boxed{(x+1)^2}", "x^2+2x+1", 1.0), (r"\boxed{\{1,2\}}", r"\{2,1\}", 1.0),
         (r"\boxed{x=3}", "3", 1.0), (r"\boxed{50\%}", "0.5", 1.0), (r"\boxed{3}", "4", 0.0), (r"\boxed{x+2}", "x+1", 0.0),
         (r"\boxed{9^{9^{9}}}", "1", 0.0), ("#### 1,000", "1000", 1.0), (r"\boxed{\frac{\sqrt{3}}{2}}", r"\sin(\pi/3)", 1.0),
         (r"\boxed{0.3333}", r"\frac13", 0.0), ("The answer is 3 or 5.", "5", 0.0), (r"\boxed{3 = 5}", "5", 0.0)]


def test_thread_pool_agrees_with_serial():
    "Rewards and statuses do not depend on how many threads score at once (the bound counts CPU time, not waiting)."
    serial = [math_reward_detail(r, l) for r, l, _ in CASES]
    assert [v for v, _, _ in serial] == [w for _, _, w in CASES]
    jobs = CASES * 3 + [(SLOW, "1", 0.0)]
    with ThreadPoolExecutor(8) as ex:
        for _ in range(2):
            got = list(ex.map(lambda c: math_reward_detail(c[0], c[1], timeout_s=0.3 if c[0] is SLOW else DEFAULT_TIMEOUT_S), jobs))
            assert got[:-1] == serial * 3
            assert got[-1][:2] == (0.0, "timeout")


def test_sleeping_is_not_counted():
    "Only CPU time counts: a block that waits far longer than its bound is not interrupted."
    def waits():
        with deadline(0.05): time.sleep(0.3); return "finished"
    assert waits() == "finished"
    out = []
    th = threading.Thread(target=lambda: out.append(waits())); th.start(); th.join(5)
    assert out == ["finished"]


def test_first_call_in_a_fresh_process():
    "The first call pays the warm-up (SymPy's lazy imports) once; later calls do not."
    code = ("import time, json; t=time.perf_counter(); from looprl.tasks.rewards import math_reward; imp=time.perf_counter()-t;"
            "t=time.perf_counter(); a=math_reward(r'\\boxed{\\frac{1}{2}}','0.5'); first=time.perf_counter()-t;"
            "t=time.perf_counter(); b=math_reward(r'\\boxed{(x+1)^2}','x^2+2x+1'); second=time.perf_counter()-t;"
            "print(json.dumps(dict(a=a, b=b, imp=imp, first=first, second=second)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["a"] == d["b"] == 1.0
    assert d["first"] < 5.0 and d["second"] < 0.5, d


# ---- refusals: responses a naive reader would pay ----

REFUSED = [("The answer is not 5.", "5", "refused:negated"), ("The answer is 3 or 5.", "3", "refused:hedged"),
           ("The answer is 3 or 5.", "5", "refused:hedged"), ("It is definitely not 7, it is 5", "7", "refused:negated"),
           ("It is definitely not 7, it is 5", "5", "refused:negated"), ("1 2 3 4 5 6 7 8 9 10", "10", "refused:several"),
           ("12 + 7 = 19", "19", "refused:several"), (r"\boxed{3 = 5}", "5", "refused:relation"),
           (r"\boxed{3} and then \boxed{5}", "5", "refused:several"), (r"\boxed{3} and then \boxed{5}", "3", "refused:several"),
           ("The answer is 3. Final answer: 5", "5", "refused:several"), ("The answer is 5, not 7.", "5", "refused:negated"),
           ("Maybe the answer is 5.", "5", "refused:hedged"), ("The answer is perhaps 5", "5", "refused:hedged"),
           (r"It is possibly $\boxed{5}$.", "5", "refused:hedged"), ("The answer is probably 5.", "5", "refused:hedged"),
           ("The answer is either 3 or 5.", "3", "refused:hedged"), (r"The answer might be $\boxed{5}$.", "5", "refused:hedged"),
           ("The answer isn't 5", "5", "refused:negated"), ("The answer is never 5.", "5", "refused:negated"),
           (r"There is no $\boxed{5}$ here.", "5", "refused:negated"), (r"\boxed{x \neq 5}", "5", "refused:negated"),
           ("The answer is 12 + 7 = 19", "19", "refused:relation"), (r"\boxed{x = y = 5}", "5", "refused:relation"),
           (r"\boxed{2x = 10}", "10", "refused:relation"), (r"\boxed{3 \text{ or } 5}", "5", "refused:hedged"),
           ("The answer is **not** 5.", "5", "refused:negated"), ("The answer is 3, or 5.", "5", "refused:hedged")]


@pytest.mark.parametrize("response,label,status", REFUSED, ids=[f"{s}:{r[:30]}" for r, _, s in REFUSED])
def test_refused_responses_score_zero(response, label, status):
    assert math_reward_detail(response, label)[:2] == (0.0, status)


PAID = [("85", "85"), (" 85.", "85"), ("85\n", "85"), ("So 85", "85"), (r"\boxed{x = 5}", "5"), (r"\boxed{x=5}", "5"),
        (r"\boxed{5} and again \boxed{5}", "5"), ("The answer is 5. Again, the answer is 5.", "5"), (r"\boxed{\boxed{8}}", "8"),
        (r"Since $x \neq 0$, we get $\boxed{5}$.", "5"), ("Perhaps I erred earlier. The answer is 5.", "5"),
        ("Final Answer: The final answer is $5$. I hope it is correct.", "5"), (r"\boxed{\theta = \frac{\pi}{4}}", r"\frac{\pi}{4}"),
        ("No, the answer is 5.", "5"), ("The answer is 5, no doubt.", "5"), (r"\boxed{3 < x < 5}", "3 < x < 5")]


@pytest.mark.parametrize("response,label", PAID, ids=[r[:30] for r, _ in PAID])
def test_plain_answers_still_pay(response, label):
    assert math_reward_detail(response, label) == (1.0, "ok", "")


def test_internal_exception_is_status_error(monkeypatch):
    def broken(answer, label): raise RuntimeError("parser bug")
    monkeypatch.setattr(rewards, "math_verify_equal", broken)
    assert math_reward_detail(r"\boxed{\frac{1}{2}}", "0.5") == (0.0, "error", "RuntimeError: parser bug")
    assert math_reward(r"\boxed{\frac{1}{2}}", "0.5") == 0.0
    assert math_reward_detail(r"\boxed{5}", "5")[:2] == (1.0, "ok")           # the fast path does not need it
    monkeypatch.undo()
    assert math_reward_detail(r"\boxed{\frac{1}{2}}", "0.5") == (1.0, "ok", "")


def test_timeout_is_status_timeout():
    r = math_reward_detail(SLOW, "1", timeout_s=0.2)
    assert r[:2] == (0.0, "timeout") and "0.2 s of CPU time" in r.detail


# ---- the CPU-time bound never binds on valid input ----

def valid_corpus() -> list[tuple]:
    "(response, label, group) of this file's valid inputs (none built to be slow); the notebook measures them too."
    out = []
    for q in NUMBERS:
        out += [(rf"\boxed{{{a}}}", b, "every form vs every form") for a in forms(q) for b in forms(q)]
        out += [(rf"The answer is ${a}$.", forms(q)[0], "forms of other numbers") for o in NUMBERS if o != q for a in forms(o)[:2]]
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randrange(-10**12, 10**12)
        out += [(f"#### {n:,}", str(n), "separators"), (f"So the total is {n:,} dollars.", str(n + 1), "separators"),
                (rf"\boxed{{{n:,}}}".replace(",", "{,}"), f"{n:,}", "separators")]
    out += [(r, l, "threads") for r, l, _ in CASES] + [(r, l, "refused") for r, l, _ in REFUSED] + [(r, l, "paid") for r, l in PAID]
    out += [(r"\boxed{0.25}", 0.25, "numeric labels"), (r"\boxed{\frac{1}{3}}", Fraction(1, 3), "numeric labels"), (r"\boxed{7}", 7, "numeric labels")]
    return out


def test_cpu_bound_never_binds_on_valid_input_fresh_process():
    """In a fresh process (after warm_up, caches emptied before each call), every valid input needs < 1/20 of the
    bound. Each input is timed twice (caches emptied both times) and the smaller CPU time counts, so a loaded machine, which
    slows a thread's CPU time too, does not decide the result."""
    code = ("import sys, time, json; sys.path.insert(0, sys.argv[1]); import test_rewards as T; from looprl.tasks.rewards import *;"
            "import math_verify.parser as mvp, sympy.core.cache as sc; warm_up(); out = []\n"
            "for r, l, g in T.valid_corpus():\n"
            "    ts = []\n"
            "    for _ in range(2):\n"
            "        mvp.parse_latex_cached.cache_clear(); mvp.parse_expr_cached.cache_clear(); sc.clear_cache()\n"
            "        c = time.thread_time(); s = math_reward_detail(r, l).status; ts.append(time.thread_time() - c)\n"
            "    out.append((min(ts), s, g))\n"
            "print(json.dumps(out))")
    p = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    costs = json.loads(p.stdout.strip().splitlines()[-1])
    worst = max(costs)
    print(f"{len(costs)} valid inputs, costliest {worst[0] * 1e3:.1f} ms CPU ({worst[2]}), bound {DEFAULT_TIMEOUT_S} s = {DEFAULT_TIMEOUT_S / worst[0]:.0f}x")
    assert not {s for _, s, _ in costs} & {"timeout", "error"}
    assert DEFAULT_TIMEOUT_S >= 20 * worst[0], worst


# ---- pluggable rewards ----

def test_load_reward_specs(tmp_path, monkeypatch):
    assert load_reward(DEFAULT_REWARD) is math_reward
    (tmp_path / "user_rewards.py").write_text("def length(response, label): return float(len(response))\n"
                                              "def tokens_seen(response, label, tokens): return float(len(tokens))\n")
    assert load_reward(f"{tmp_path}/user_rewards.py:length")("abc", "x") == 3.0                  # a file, absolute path
    monkeypatch.chdir(tmp_path)
    assert load_reward("user_rewards.py:length")("ab", "x") == 2.0                              # a file, relative path
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_reward("user_rewards:tokens_seen").__name__ == "tokens_seen"                    # a module on sys.path


@pytest.mark.parametrize("source,attr,says", [
    ("def f(response): return 1.0\n", "f", "signature wrong"),
    ("def f(response, label, extra): return 1.0\n", "f", "signature wrong"),
    ("def f(response, label, *, tokens, more): return 1.0\n", "f", "signature wrong"),
    ("f = 3\n", "f", "not callable"),
    ("def f(response, label): return 1.0\n", "g", "no attribute 'g'"),
    ("import no_such_dependency_xyz\ndef f(response, label): return 1.0\n", "f", "No module named 'no_such_dependency_xyz'"),
    ("raise RuntimeError('broken at import')\n", "f", "broken at import")])
def test_load_reward_bad_file_specs(tmp_path, source, attr, says):
    (tmp_path / "r.py").write_text(source)
    spec = f"{tmp_path}/r.py:{attr}"
    with pytest.raises(ValueError) as e: load_reward(spec)
    assert says in str(e.value) and repr(spec) in str(e.value), str(e.value)


@pytest.mark.parametrize("spec,says", [("looprl.tasks.rewards", "expected 'module:function'"), (":math_reward", "expected"),
                                       ("looprl.tasks.rewards:", "expected"), ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
                                       ("looprl.no_such_module:f", "no module named 'looprl.no_such_module'"),
                                       ("looprl.tasks.rewards:nope", "no attribute 'nope'"), ("missing/file.py:f", "no file"),
                                       ("looprl.tasks.rewards:REWARD_STATUSES", "not callable"), (3, "expected")])
def test_load_reward_bad_specs(spec, says):
    with pytest.raises(ValueError) as e: load_reward(spec)
    assert says in str(e.value) and repr(spec) in str(e.value), str(e.value)


def test_score_completion_convention_and_checks():
    assert score_completion(math_reward, r"\boxed{3} and \boxed{5}", "5", [1]) == (0.0, "refused:several", "")
    got = []
    def text(response, label): got.append("text"); return 0
    def toks(response, label, tokens): got.append(tokens); return 0.5
    assert score_completion(text, "r", "l", [1, 2]) == RewardResult(0.0, "ok")
    assert score_completion(toks, "r", "l", (1, 2)) == RewardResult(0.5, "ok")
    assert got == ["text", [1, 2]]
    for bad in (False, float("nan"), float("-inf"), "0.5", None, 10**400, complex(1, 0)):
        with pytest.raises(RewardError, match=r"reward .*<lambda> returned"): score_completion(lambda response, label: bad, "r", "l", [])
    def boom(response, label): raise KeyError("label")
    with pytest.raises(RewardError, match=r"test_rewards.*boom raised KeyError") as e: score_completion(boom, "r", "l", [])
    assert isinstance(e.value, ValueError) and isinstance(e.value.__cause__, KeyError)


def test_math_reward_exceptions_do_not_propagate_through_score_completion(monkeypatch):
    monkeypatch.setattr(rewards, "read_answer", lambda text: 1 / 0)
    assert score_completion(math_reward, "r", "5", [])[:2] == (0.0, "error")


def test_even_token_share():
    fn = load_reward("looprl.tasks.rewards:even_token_share")
    assert fn is even_token_share
    assert score_completion(fn, "", "", [2, 3, 4, 6]).value == 0.75
    assert score_completion(fn, "", "", []).value == 0.0
    rng = random.Random(0)
    values = [score_completion(fn, "", "", [rng.randrange(50_000) for _ in range(32)]).value for _ in range(16)]
    assert len(set(values)) > 1                          # mixed rewards from random tokens: non-zero advantages


def test_reward_identity(tmp_path):
    builtin = reward_identity(DEFAULT_REWARD)
    assert builtin == {"spec": DEFAULT_REWARD, "source_sha256": hashlib.sha256(Path(rewards.__file__).read_bytes()).hexdigest()}
    f = tmp_path / "mine.py"
    f.write_text("def r(response, label): return 1.0\n")
    spec = f"{f}:r"
    first = reward_identity(spec)
    assert first == {"spec": spec, "source_sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
    assert reward_identity(spec) == first
    f.write_text("def r(response, label): return 0.0\n")
    assert reward_identity(spec)["source_sha256"] != first["source_sha256"]
    with pytest.raises(ValueError, match="no file"): reward_identity(f"{tmp_path}/gone.py:r")


@pytest.mark.parametrize("response", [r"\boxed{1} " * 2000, r"\boxed{1}, " * 1800, "The answer is 1. " * 1200, "1 " * 10000,
                                      "not " * 5000 + "1", "maybe or " * 2000 + "1", r"\boxed{" * 5000 + "1" + "}" * 5000],
                         ids=["boxes", "boxes-commas", "phrases", "numbers", "negations", "hedges", "nested-boxes"])
def test_many_answers_stay_cheap(response):
    "Responses full of answers, negations or hedges cost little CPU time: extraction and refusals are linear."
    c = time.thread_time()
    r = math_reward_detail(response, "1")
    assert time.thread_time() - c < 0.5 and r.status in REWARD_STATUSES and r.status != "error", r
