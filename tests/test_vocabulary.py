"""One vocabulary across the commands: a setting that several commands take has one flag name in all of them
(`python -m looprl.train`'s), a flag name means one setting wherever it appears, and a renamed flag's old name is a
hidden alias that says, in one line on stderr, which flag to use instead (`looprl.core.cli.rename_flag`).

The parsers are the commands' own: each command's `main` is run until it parses, and its parser taken there. A
setting is told by its argparse destination; a name reused for another setting is allowed only where `DISTINCT` says
why. Each check has a twin that breaks the guarded thing and sees the check fail."""
import argparse, contextlib, importlib, io
import pytest
from looprl.core.cli import CommandParser, RenamedFlag

COMMANDS = ("train", "eval", "verify", "warmstart", "compare", "inspect", "plots", "make_tiny", "bench")
# an old name that another command keeps for a setting of its own, and why the two are not the same setting
DISTINCT = {"--samples": "verify: completions to generate, one per random prompt; eval's old --samples counted "
                         "sampled completions per held-out question (now --eval-samples, as train)",
            "--data": "train: the training prompts; eval's old --data was the held-out questions (now --eval-data, "
                      "as train)"}


class Caught(Exception):
    def __init__(self, parser): self.parser = parser


def command_parser_of(name: str, monkeypatch) -> argparse.ArgumentParser:
    "The parser `python -m looprl.<name>` builds, taken where its `main` parses."
    def catch(self, *args, **kwargs): raise Caught(self)
    module = importlib.import_module(f"looprl.{name}")
    with monkeypatch.context() as m:
        m.setattr(CommandParser, "parse_args", catch)
        try: module.main([])
        except Caught as c: return c.parser
    raise AssertionError(f"looprl.{name}.main parsed nothing")


def subcommands(p) -> dict:
    return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


@pytest.fixture(scope="module")
def parsers():
    "Command → (its parser, the argv prefix that selects it, the top parser): bench's subcommands one each."
    mp = pytest.MonkeyPatch()
    try:
        out = {}
        for name in COMMANDS:
            p = command_parser_of(name, mp)
            subs = subcommands(p)
            out.update({f"{name} {k}": (s, [k], p) for k, s in subs.items()} if subs else {name: (p, [], p)})
        return out
    finally: mp.undo()


def visible_flags(p) -> dict:
    "Setting (destination) → the flag names --help shows for it."
    d = {}
    for a in p._actions:
        if a.option_strings and not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS:
            d.setdefault(a.dest, set()).update(a.option_strings)
    return d


def hidden_options(p) -> list:
    return [a for a in p._actions if a.option_strings and a.help == argparse.SUPPRESS]


def vocabulary_faults(parsers: dict, distinct: dict = DISTINCT) -> list[str]:
    "Every setting with two names, every name with two settings, every old name shown as a flag (unless `distinct`)."
    names, settings, faults = {}, {}, []
    for cmd, (p, _, _) in parsers.items():
        for dest, flags in visible_flags(p).items():
            names.setdefault(dest, {}).setdefault(frozenset(flags), []).append(cmd)
            for f in flags: settings.setdefault(f, {}).setdefault(dest, []).append(cmd)
    for dest, by in names.items():
        if len(by) > 1:
            faults.append(f"setting {dest} has {len(by)} names: "
                          + "; ".join(f"{'/'.join(sorted(f))} in {', '.join(c)}" for f, c in by.items()))
    for flag, by in settings.items():
        if len(by) > 1:
            faults.append(f"{flag} names {len(by)} settings: " + "; ".join(f"{d} in {', '.join(c)}" for d, c in by.items()))
    old = {s for p, _, _ in parsers.values() for a in hidden_options(p) for s in a.option_strings}
    for flag in sorted(old & set(settings) - set(distinct)):
        faults.append(f"{flag} is an old name and still a flag of {', '.join(c for cs in settings[flag].values() for c in cs)}")
    return faults


def filler(p) -> list[str]:
    "Arguments that let `p` parse: its positionals and required options, each given a placeholder."
    argv = []
    for a in p._actions:
        if not a.option_strings and a.nargs in (None, "+") and not isinstance(a, argparse._SubParsersAction):
            argv.append("x")
        elif a.option_strings and a.required: argv += [a.option_strings[0], "x"]
    return argv


def value_for(a) -> list[str]:
    if a.nargs == 0: return []
    if a.choices: return [str(list(a.choices)[0])]
    return [{int: "3", float: "0.5"}.get(a.type, "x")]


def parse(top, argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try: ns = top.parse_args(argv)
        except SystemExit: ns = None
    return ns, err.getvalue()


def alias_faults(parsers: dict) -> list[str]:
    """Every hidden option must be an announced alias of a visible flag of its parser: parsed as that flag (same
    setting, same value) and saying so in exactly one line on stderr that names the flag."""
    faults = []
    for cmd, (p, prefix, top) in parsers.items():
        shown = {f: dest for dest, fs in visible_flags(p).items() for f in fs}
        for a in hidden_options(p):
            old = a.option_strings[0]
            if not isinstance(a, RenamedFlag) or shown.get(a.new) != a.dest:
                faults.append(f"{cmd}: {old} is hidden but not an announced alias of a flag of {cmd}"); continue
            base, v = prefix + filler(p), value_for(a)
            got, said = parse(top, base + [old, *v])
            want, quiet = parse(top, base + [a.new, *v])
            lines = said.splitlines()
            if got is None or want is None or getattr(got, a.dest) != getattr(want, a.dest):
                faults.append(f"{cmd}: {old} {' '.join(v)} does not parse as {a.new} {' '.join(v)}")
            if len(lines) != 1 or a.new not in lines[0] or old not in lines[0] or quiet:
                faults.append(f"{cmd}: {old} says {lines!r} on stderr, not one line naming {a.new}")
    return faults


def shared_settings(parsers: dict) -> dict:
    "Flag → the commands that take it, for every flag more than one command takes (one name each: checked above)."
    by = {}
    for cmd, (p, _, _) in parsers.items():
        for flags in visible_flags(p).values():
            for f in flags: by.setdefault(f, []).append(cmd)
    return {f: cs for f, cs in sorted(by.items()) if len(cs) > 1}


# the holds: the shipped commands speak one vocabulary

def test_every_setting_has_one_name_across_the_commands(parsers):
    assert vocabulary_faults(parsers) == []
    table = shared_settings(parsers)
    for f, cs in table.items(): print(f"{f:24} {', '.join(cs)}")
    # train's names for what eval, verify, warmstart and bench share with it
    for flag, cmds in {"--max-response-tokens": ("train", "eval", "verify"), "--precision": ("train", "eval", "verify"),
                       "--eval-limit": ("train", "eval"), "--eval-samples": ("train", "eval"),
                       "--eval-data": ("train", "eval"), "--no-eval": ("train", "warmstart")}.items():
        assert set(cmds) <= set(table[flag]), (flag, table[flag])


def test_every_old_name_is_an_announced_alias(parsers):
    renamed = {(cmd, a.option_strings[0], a.new) for cmd, (p, _, _) in parsers.items() for a in hidden_options(p)}
    assert {("eval", "--limit", "--eval-limit"), ("eval", "--samples", "--eval-samples"),
            ("eval", "--data", "--eval-data"), ("eval", "--max-new-tokens", "--max-response-tokens"),
            ("verify", "--dtype", "--precision"), ("verify", "--max-new-tokens", "--max-response-tokens"),
            ("warmstart", "--no-evaluate", "--no-eval"), ("bench rollout", "--dtype", "--precision")} <= renamed
    assert alias_faults(parsers) == []
    for cmd, (p, _, _) in parsers.items():              # and none of them in the help
        assert not {a.option_strings[0] for a in hidden_options(p)} & set(p.format_help().split()), cmd


# the twins: each check sees its guarded thing broken

def with_parser(parsers, cmd, build):
    p = CommandParser(prog=f"python -m looprl.{cmd}", command=cmd)
    build(p)
    return {**parsers, cmd: (p, [], p)}


def test_twin_a_second_name_for_a_setting_fails(parsers):
    deviant = with_parser(parsers, "deviant", lambda p: p.add_argument("--max-new-tokens", dest="max_response_tokens",
                                                                        type=int))
    assert any(f.startswith("setting max_response_tokens has 2 names") for f in vocabulary_faults(deviant))


def test_twin_an_old_name_kept_as_a_flag_of_its_own_fails(parsers):
    deviant = with_parser(parsers, "deviant", lambda p: p.add_argument("--limit", type=int))
    assert vocabulary_faults(deviant) == ["--limit is an old name and still a flag of deviant"]
    # the same name where DISTINCT says why it is another setting passes
    assert vocabulary_faults(deviant, {**DISTINCT, "--limit": "a reason"}) == []


def test_twin_a_name_for_two_settings_fails(parsers):
    deviant = with_parser(parsers, "deviant", lambda p: p.add_argument("--seed", dest="data_seed", type=int))
    assert any(f.startswith("--seed names 2 settings") for f in vocabulary_faults(deviant))


def test_twin_a_silent_or_unannounced_alias_fails(parsers):
    def hidden(p):
        p.add_argument("--eval-limit", type=int, help="evaluate only the first N questions")
        p.add_argument("--limit", dest="eval_limit", type=int, help=argparse.SUPPRESS)
    assert alias_faults(with_parser(parsers, "deviant", hidden)) == [
        "deviant: --limit is hidden but not an announced alias of a flag of deviant"]

    class Silent(RenamedFlag):
        def __call__(self, parser, namespace, values, option_string=None): self.target(parser, namespace, values)
    def silent(p):
        t = p.add_argument("--eval-limit", type=int, help="evaluate only the first N questions")
        p.add_argument("--limit", action=Silent, dest="eval_limit", new="--eval-limit", target=t)
    assert alias_faults(with_parser(parsers, "deviant", silent)) == [
        "deviant: --limit says [] on stderr, not one line naming --eval-limit"]


# train's flags read without torch: the stored table is the declarations' own

def test_train_flags_from_the_table_are_the_declared_flags():
    from looprl.train import declared_parser, flag_rows, table_parser, FLAG_TABLE
    fast = table_parser()
    assert fast is not None, f"{FLAG_TABLE} is stale: python -c 'from looprl.train import write_flag_table; write_flag_table()'"
    slow = declared_parser()
    assert flag_rows(fast) == flag_rows(slow) and fast.format_help() == slow.format_help()


def test_twin_a_stale_or_altered_flag_table_is_caught(tmp_path):
    import json
    from looprl.train import declared_parser, flag_rows, table_parser, FLAG_TABLE
    doc = json.loads(FLAG_TABLE.read_text())
    stale = tmp_path / "stale.json"; stale.write_text(json.dumps(dict(doc, sources="0" * 64)))
    assert table_parser(stale) is None                       # made from other sources: not used
    doc["flags"][0]["help"] += " (altered)"
    altered = tmp_path / "altered.json"; altered.write_text(json.dumps(doc))
    assert flag_rows(table_parser(altered)) != flag_rows(declared_parser())
