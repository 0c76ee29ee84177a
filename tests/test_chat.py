"""Prompts as a checkpoint expects them (looprl.tasks.chat, looprl.tasks.prompting): bad message rows and a failing
template refused at the command line, the thinking section graded as documented, plain runs' contracts unchanged, and
the rendered prompt ids equal to transformers' `apply_chat_template(..., add_generation_prompt=True)` (that test runs
where transformers is installed, e.g. a side environment: python -m venv --system-site-packages V;
V/bin/pip install --no-deps transformers; V/bin/python -m pytest tests/test_chat.py)."""
import json, subprocess, sys
from pathlib import Path
import pytest
from tokenizers import Tokenizer
from looprl.tasks.chat import ChatTemplate, load_chat_template, shipped_template, TEMPLATES
from looprl.tasks.data import build_char_tokenizer, TINY_ALPHABET
from looprl.tasks.prompting import (Prompter, ThinkingSection, grade, prompt_contract, stop_token_ids,
                                    UNCLOSED_THINKING_REWARD)
from looprl.tasks.rewards import math_reward
from looprl.model.config import load_config
from looprl.model.registry import default_family

def train(tmp_path, rows, *flags):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "looprl.train", "--output", str(out), "--data", str(data), "--updates", "1",
                        "--rollout-batch-size", "2", "--no-eval", *flags], capture_output=True, text=True, timeout=300)
    return p, out, data

GOOD = {"messages": [{"role": "user", "content": "1+1="}], "label": "2"}
THINK = str(TEMPLATES / "chatml-think.jinja")

@pytest.mark.parametrize("bad, says", [
    ({"messages": [{"role": "robot", "content": "1+1="}], "label": "2"}, "rows.jsonl:2: field 'messages[0]': unknown role"),
    ({"messages": [{"role": "system", "content": "x"}], "label": "2"}, "rows.jsonl:2: field 'messages': no user turn"),
    ({"messages": [{"role": "user"}], "label": "2"}, "rows.jsonl:2: field 'messages[0]': a turn is an object"),
    ({"messages": [{"role": "user", "content": "x"}], "prompt": "x", "label": "2"}, "rows.jsonl:2: fields 'prompt' and"),
])
def test_bad_message_rows_are_refused_naming_file_and_line(tmp_path, bad, says):
    p, out, _ = train(tmp_path, [GOOD, bad], "--chat-template", THINK)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()

def test_a_template_that_raises_is_refused_naming_file_and_line(tmp_path):
    t = tmp_path / "t.jinja"
    t.write_text("{% if messages|length > 1 %}{{ raise_exception('one turn only') }}{% endif %}{{ messages[0].content }}")
    two = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "1+1="}], "label": "2"}
    p, out, _ = train(tmp_path, [GOOD, GOOD, two], "--chat-template", str(t))
    assert p.returncode == 2 and "rows.jsonl:3: field 'messages':" in p.stderr and "one turn only" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()

def test_message_rows_need_a_template(tmp_path):
    p, out, _ = train(tmp_path, [GOOD])            # the tiny model has no template
    assert p.returncode == 2 and "rows.jsonl:1: field 'messages': needs a chat template" in p.stderr, p.stderr
    assert not out.exists()

def test_the_thinking_section_is_not_graded_and_an_unclosed_one_is_penalised():
    s = ThinkingSection()
    inside = "The answer is 4. </think> The answer is 5."
    assert grade(math_reward, inside, "4", [], s)[0].value == 0.0              # the answer after </think> is graded
    assert grade(math_reward, inside, "5", [], s)[0].value == 1.0
    unclosed = "The answer is 4."
    r = grade(math_reward, unclosed, "4", [], s)[0]
    assert (r.value, r.status) == (UNCLOSED_THINKING_REWARD, "unclosed_thinking")
    # the twin: without the section the same texts are graded whole, and the answer inside the thinking counts
    assert grade(math_reward, unclosed, "4", [], None)[0].value == 1.0
    assert grade(math_reward, inside, "4", [], None)[0].status == "refused:several"

def test_a_plain_run_records_no_prompt_contract_so_old_runs_resume():
    d = default_family().embedded
    cfg, tok = load_config(d), build_char_tokenizer()
    assert prompt_contract(Prompter(), stop_token_ids(d, cfg, tok), cfg) == {}
    # the twin: any change to how prompts are made is recorded
    assert prompt_contract(Prompter(), stop_token_ids(d, cfg, tok, ["5"]), cfg)["prompt"]["stop_ids"] == [2, 5]
    assert prompt_contract(Prompter(shipped_template("chatml-think")), (2,), cfg)["prompt"]["thinking"] == \
        ["<think>", "</think>"]

# ------------------------------------------------------------------ equality with transformers (side environment)
HUGINN_TOKENS = ["<|begin_text|>", "<|end_text|>", "<|begin_header|>", "<|end_header|>", "<|end_turn|>"]
CHATML_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 12+30?"}],
    [{"role": "system", "content": "You are brief."}, {"role": "user", "content": " 7*6? "}],
    [{"role": "system", "content": "Math."}, {"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
     {"role": "user", "content": "and 2+2?"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c\n\nd"}],
]
LOOSE = "{% for m in messages %}\n  {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}\n{% if add_generation_prompt %}A:{% endif %}"

def checkpoint(tmp_path, name, template, specials, bos, eos):
    "A tokenizer directory: looprl's character tokenizer with the family's special tokens, and a tokenizer_config."
    d = tmp_path / name; d.mkdir()
    extra = "".join(sorted({ch for ch in template if ch not in TINY_ALPHABET}))      # Nanbeige's Chinese system turn
    tok = build_char_tokenizer(TINY_ALPHABET + extra); tok.add_special_tokens(specials)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(dict(chat_template=template, bos_token=bos, eos_token=eos,
                                                             tokenizer_class="PreTrainedTokenizerFast")))
    return d, tok

# Nanbeige4.2-3B's released tokenizer_config.json is not shipped (7.5 kB of template); the test reads it from the
# shared reference folder beside the repository where it is at hand
NANBEIGE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "templates" / "nanbeige4.2-3b.tokenizer_config.json"
CONVERSATIONS_THINK = CONVERSATIONS + [[{"role": "user", "content": "1+1?"},
                                        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"},
                                        {"role": "user", "content": "2+2?"}]]

@pytest.mark.parametrize("name", ["huginn-0125", "chatml-think", "nanbeige4.2-3b", "loose"])
def test_prompt_ids_equal_transformers_apply_chat_template(tmp_path, name):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed here: the equality with "
                                       "apply_chat_template runs in a side environment that has it")
    if name == "nanbeige4.2-3b":
        if not NANBEIGE.is_file(): pytest.skip(f"Nanbeige4.2-3B's tokenizer_config.json is not at {NANBEIGE}")
        source = json.loads(NANBEIGE.read_text())["chat_template"]
    else: source = LOOSE if name == "loose" else (TEMPLATES / f"{name}.jinja").read_text()
    specials, bos, eos = (HUGINN_TOKENS, "<|begin_text|>", "<|end_text|>") if name == "huginn-0125" else \
        (CHATML_TOKENS + ["<think>", "</think>"], "<|im_start|>", "<|im_end|>")
    d, tok = checkpoint(tmp_path, name, source, specials, bos, eos)
    theirs = transformers.AutoTokenizer.from_pretrained(str(d))
    p, cfg = Prompter(load_chat_template(d)), load_config(default_family().embedded)
    import jinja2
    plain = jinja2.Environment()                                   # the twin: Jinja without transformers' settings
    differs = 0
    for msgs in (CONVERSATIONS_THINK if name != "huginn-0125" else CONVERSATIONS):
        want = theirs.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        want = want["input_ids"] if hasattr(want, "keys") else want
        assert p.encode(tok, cfg, {"messages": msgs, "label": "0"}) == list(want), msgs
        if name == "loose":
            text = plain.from_string(source).render(messages=msgs, add_generation_prompt=True)
            differs += tok.encode(text, add_special_tokens=False).ids != list(want)
    if name == "loose": assert differs == len(CONVERSATIONS_THINK)        # trim_blocks/lstrip_blocks matter, and are seen

def tiny_with_chat(tmp_path, family: str, chat: str):
    "A tiny checkpoint of `family` with the tokenizer files of the chat template `chat` (looprl.make_tiny --chat)."
    model = tmp_path / "model"
    p = subprocess.run([sys.executable, "-m", "looprl.make_tiny", "--family", family, str(model), "--chat", chat],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return model

def test_a_run_with_huginns_template_renders_message_rows_and_exports_the_template(tmp_path):
    "A tiny Huginn with Huginn-0125's tokenizer files: prompts rendered, every EOS id a stop id, the template exported."
    model = tiny_with_chat(tmp_path, "huginn_raven", "huginn-0125")
    gen = json.loads((model / "generation_config.json").read_text())
    rows = [{"messages": [{"role": "user", "content": f"{a}+{a}="}], "label": str(2 * a)} for a in range(10, 14)]
    p, out, _ = train(tmp_path, rows, "--model", str(model), "--max-response-tokens", "6", "--n-samples-per-prompt", "2")
    assert p.returncode == 0, p.stderr
    contract = json.loads((out / "run.json").read_text())["contract"]
    assert contract["prompt"]["stop_ids"] == [2, *gen["eos_token_id"]] and contract["prompt"]["thinking"] is None
    rec = json.loads((out / "rollouts" / "update-000000.json").read_text())["completions"][0]
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    text = tok.decode(rec["prompt_ids"], skip_special_tokens=False)
    assert text.startswith("<|begin_text|><|begin_header|>user<|end_header|>\n\n") and \
        text.endswith("<|end_turn|><|begin_header|>Huginn<|end_header|>\n\n"), text
    policy = out / "policies" / (out / "policies" / "latest").read_text().strip()
    assert (policy / "tokenizer_config.json").read_bytes() == (model / "tokenizer_config.json").read_bytes()
    assert (policy / "generation_config.json").is_file()

@pytest.mark.parametrize("flags, says", [
    (["--chat-template", "no-such-template.jinja"], "--chat-template: no-such-template.jinja: no such file"),
    (["--system-prompt", "be brief"], "--system-prompt: needs a chat template"),
    (["--stop", "ab"], "--stop 'ab': encodes to 2 tokens"),
    (["--stop", "5000"], "--stop 5000: not an id of the model's 1024"),
])
def test_bad_prompt_flags_are_refused_in_one_line(tmp_path, flags, says):
    p, out, _ = train(tmp_path, [{"prompt": "1+1=", "label": "2"}], *flags)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()

NO_JINJA = "import sys; sys.modules['jinja2'] = None; from looprl.train import main; sys.exit(main(sys.argv[1:]))"

def test_without_jinja2_a_template_is_refused_in_one_line_and_plain_prompts_still_run(tmp_path):
    data = tmp_path / "rows.jsonl"; data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    common = ["--data", str(data), "--updates", "1", "--rollout-batch-size", "2", "--no-eval", "--no-progress"]
    p = subprocess.run([sys.executable, "-c", NO_JINJA, "--output", str(tmp_path / "a"), *common, "--chat-template",
                        THINK], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "chat templates need jinja2" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
    p = subprocess.run([sys.executable, "-c", NO_JINJA, "--output", str(tmp_path / "b"), *common],
                       capture_output=True, text=True, timeout=300)       # the tiny model has no template: no jinja2
    assert p.returncode == 0 and (tmp_path / "b" / "summary.json").is_file(), p.stderr

def test_a_run_whose_template_opens_a_thinking_section_reports_its_lengths(tmp_path):
    "A random tiny model never closes `<think>`: every completion earns the unclosed-section penalty, and is counted."
    model = tiny_with_chat(tmp_path, "ouro", "chatml-think")
    p, out, _ = train(tmp_path, [{"prompt": f"{a}+1=", "label": str(a + 1)} for a in range(4)], "--model", str(model),
                      "--max-response-tokens", "6", "--n-samples-per-prompt", "2", "--system-prompt", "add")
    assert p.returncode == 0, p.stderr
    line = next(json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"kind": "update"' in l)
    assert line["reward_statuses"] == {"unclosed_thinking": 4} and line["unclosed_thinking"] == 4
    assert line["mean_answer_chars"] == 0 and line["mean_thinking_chars"] > 0
    assert json.loads((out / "run.json").read_text())["contract"]["prompt"]["system_prompt"] == "add"
