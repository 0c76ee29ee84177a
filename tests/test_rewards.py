"Larger matrices, fuzzing, threads and deadlines for `looprl.rewards.math_reward`."
import json, random, signal, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest

from looprl.rewards import (AnswerTimeout, MAX_RESPONSE_CHARS, deadline, extract_answer, math_reward, too_costly,
                            warm_up)

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
    assert extract_answer(r"Answer: 3. The answer is 5, and 7 more") == "5"    # the last phrase wins over the last number
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
        r = math_reward(resp, label)
        slowest = max(slowest, time.perf_counter() - t)
        assert r in (0.0, 1.0) and type(r) is float
    assert slowest < 1.0, slowest


@pytest.mark.parametrize("resp,label", [(b"\\boxed{1}", "1"), (["1"], "1"), ({"a": 1}, "1"), (1.0, "1"), (r"\boxed{1}", b"1"),
                                        (r"\boxed{1}", True), (r"\boxed{1}", ["1"]), (r"\boxed{1}", object()),
                                        (r"\boxed{1}", float("nan")), ("\ud800", "1")])
def test_non_str_inputs_score_zero(resp, label):
    assert math_reward(resp, label) == 0.0


def test_numeric_labels():
    assert math_reward(r"\boxed{0.25}", 0.25) == 1.0
    assert math_reward(r"\boxed{\frac{1}{3}}", Fraction(1, 3)) == 1.0
    assert math_reward(r"\boxed{7}", 7) == 1.0


def test_huge_label_scores_zero_quickly():
    t = time.perf_counter()
    assert math_reward(r"\boxed{1}", "1" * (MAX_RESPONSE_CHARS + 1)) == 0.0
    assert time.perf_counter() - t < 0.5


SLOW = r"\boxed{(x+y+z)^{60}}"       # passes the screen; SymPy needs ~9 s without a deadline


def test_slow_expression_passes_the_screen():
    assert too_costly("(x+y+z)^{60}") is None


def test_deadline_main_thread_and_state_restored():
    calls = []
    def mine(signum, frame): calls.append(signum)
    old = signal.signal(signal.SIGALRM, mine)
    try:
        t = time.perf_counter()
        assert math_reward(SLOW, "1", timeout_s=0.3) == 0.0
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
        assert math_reward(SLOW, "1", timeout_s=0.3) == 0.0
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
        out["r"] = math_reward(SLOW, "1", timeout_s=0.3)
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
            with deadline(0.05, max_wall_s=0.2): spin()
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
        for _ in range(300):
            try:
                try:
                    with deadline(0.002, max_wall_s=0.003): busy(rng.randrange(0, 40_000))
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
         (r"\boxed{0.3333}", r"\frac13", 0.0), (SLOW, "1", 0.0)]


def test_thread_pool_agrees_with_serial():
    serial = [math_reward(r, l) for r, l, _ in CASES]
    assert serial == [w for _, _, w in CASES]
    with ThreadPoolExecutor(8) as ex:
        for _ in range(2):
            assert list(ex.map(lambda c: math_reward(c[0], c[1]), CASES * 3)) == serial * 3


def test_first_call_in_a_fresh_process():
    "The first call pays the warm-up (SymPy's lazy imports) once; later calls do not."
    code = ("import time, json; t=time.perf_counter(); from looprl.rewards import math_reward; imp=time.perf_counter()-t;"
            "t=time.perf_counter(); a=math_reward(r'\\boxed{\\frac{1}{2}}','0.5'); first=time.perf_counter()-t;"
            "t=time.perf_counter(); b=math_reward(r'\\boxed{(x+1)^2}','x^2+2x+1'); second=time.perf_counter()-t;"
            "print(json.dumps(dict(a=a, b=b, imp=imp, first=first, second=second)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["a"] == d["b"] == 1.0
    assert d["first"] < 5.0 and d["second"] < 0.5, d
