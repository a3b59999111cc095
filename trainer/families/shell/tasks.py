"""Shell tasks generated from a seed and a level: what the sandbox starts from, what the final
tree must hold, and a reference and a wrong command script.

Three families, each a function ``(rng, level) -> ShellTask``:

* ``data``: CSV files under ``data/`` to summarise with standard tools into one output file
  (totals per group, the distinct values over a threshold, or the filtered and sorted rows);
  the level is the number of files and rows.
* ``config``: a small Python program whose run (``bash run.sh``) fails on broken configuration
  (a JSON syntax error, a misspelt INI section, an ``.env`` line the loader refuses, an import
  of a module that was renamed); the level is the number of faults.
* ``git``: a repository whose history the trusted setup builds: restore a deleted file's last
  committed content and commit it, merge a branch resolving its conflicts by a stated rule and
  commit the merge, or find the first commit that broke a check (``git bisect``) leaving the
  history as it was; the level is the depth of the history.

Every input (values, names, contents, which commit breaks) comes from the seed, so no answer is
a constant. ``expected`` holds what trusted code checks in the final tree; ``check`` names a
command the verifier runs in a fresh sandbox with the task's own copy of ``restore`` put back;
``git`` says what the repository itself must hold (its commits are checked by id, and trusted
code knows the ids of the task's own: :class:`History`).

>>> merge = shell_task("git", 1, 0)
>>> merge.git, sorted(merge.heads), sorted(merge.committed) == sorted(merge.expected)
('merge', ['feature', 'main'], True)

>>> task = shell_task("data", 7, 1)
>>> sorted(task.files)[:2], task.outputs
(['data/sales-1.csv', 'data/sales-2.csv'], ['out/report.csv'])
>>> shell_task("data", 7, 1) == task
True
"""
from __future__ import annotations

import base64
import dataclasses
import json
import random
import zlib
from dataclasses import dataclass, field
from typing import Any

from trainer.families.shell.gitobjects import Repo

FAMILIES = ("data", "config", "git")
LEVELS = 4
SYLLABLES = ("ba", "ko", "ri", "mu", "te", "sa", "lo", "ne", "vi", "du", "ga", "pe", "zo", "fi", "ha", "ju")
REGIONS = ("north", "south", "east", "west", "centre", "coast", "hills", "plains")


@dataclass(frozen=True)
class ShellTask:
    """One generated shell task."""

    family: str
    prompt: str
    files: dict[str, str]
    """The working tree the episode starts from (after ``setup``, which leaves it as it is)."""
    setup: str = ""
    """Trusted script run in /work before the first turn (builds a git history)."""
    expected: dict[str, str] = field(default_factory=dict)
    """Files the final tree must hold, exactly (trailing whitespace of the file aside)."""
    solved: dict[str, str] = field(default_factory=dict)
    """Other files the reference changes (a repair outside the checked files)."""
    outputs: list[str] = field(default_factory=list)
    """Files the task asks the candidate to write."""
    check: str = ""
    """A command that must exit 0 in a fresh sandbox on the final tree (``restore`` put back)."""
    check_stdout: str = ""
    """The command's exact standard output."""
    restore: list[str] = field(default_factory=list)
    """Files taken from the task, not the final tree, when ``check`` runs."""
    probes: list[tuple[dict[str, str], str]] = field(default_factory=list)
    """Further ``check`` runs, each in its own fresh sandbox: files put over the final tree (other
    values in the same well-formed configuration) and the exact standard output they must give, so
    a program that prints the answer for the task's own values without reading them fails."""
    reference: list[str] = field(default_factory=list)
    """Commands that solve the task in the shell."""
    wrong: list[str] = field(default_factory=list)
    """Commands that look like a solution and are not."""
    git: str = ""
    """What the repository must hold at the end, read back as a bundle ('' for a task that asks
    nothing of it): ``unchanged``, main's last commit as the task left it, checked out; ``commit``,
    new commits on main above its last one, none rewritten, checked out; ``merge``, main's last
    commit a merge whose parents are main's and feature's last commits, checked out."""
    committed: list[str] = field(default_factory=list)
    """Files of ``expected`` that main's last commit must hold too."""
    heads: dict[str, str] = field(default_factory=dict)
    """The task's branches and their last commits (the ids trusted code computed)."""
    before: bytes = b""
    """The task's repository as a git bundle (what an episode that does nothing submits)."""
    after: bytes = b""
    """The reference's repository as a git bundle."""

    def final(self) -> dict[str, str]:
        """The final tree the reference leaves."""
        return {**self.files, **self.solved, **self.expected}


def word(rng: random.Random, parts: int = 3) -> str:
    """A pronounceable made-up word."""
    return "".join(rng.choice(SYLLABLES) for _ in range(parts))


def words(rng: random.Random, count: int, parts: int = 3) -> list[str]:
    """``count`` distinct words."""
    out: list[str] = []
    while len(out) < count:
        if (w := word(rng, parts)) not in out:
            out.append(w)
    return out


def lines(rows: list[str]) -> str:
    return "".join(row + "\n" for row in rows)


# -- data ---------------------------------------------------------------------------------------

def data_task(rng: random.Random, level: int) -> ShellTask:
    """Summarise generated sales CSVs (see the module docstring)."""
    n_files, n_rows = [1, 2, 4, 8][level], [12, 25, 40, 60][level]
    regions = rng.sample(REGIONS, 3 + level)
    products = words(rng, 4 + 2 * level)
    rows: list[tuple[str, str, str, int]] = []
    files: dict[str, str] = {}
    for i in range(1, n_files + 1):
        part = [(f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", rng.choice(regions), rng.choice(products),
                 rng.randint(1, 99)) for _ in range(n_rows)]
        rows += part
        files[f"data/sales-{i}.csv"] = lines(["date,region,product,qty"] + [f"{d},{r},{p},{q}" for d, r, p, q in part])
    every = "data/*.csv"
    kind = rng.choice(["totals", "above", "rows"])
    if kind == "totals":
        out = "out/report.tsv"
        totals: dict[str, int] = {}
        for _, r, _, q in rows:
            totals[r] = totals.get(r, 0) + q
        result = [f"{r}\t{totals[r]}" for r in sorted(totals)]
        ask = (f"write {out} with one line per region, the region and the total qty of all its rows separated by "
               "one tab, sorted by region")
        make = f"tail -q -n +2 {every} | awk -F, '{{s[$2]+=$4}} END {{for (r in s) print r \"\\t\" s[r]}}' | sort > {out}"
    elif kind == "above":
        out = "out/report.txt"
        threshold = sorted(q for *_, q in rows)[len(rows) // 2]
        result = sorted({p for _, _, p, q in rows if q > threshold})
        ask = f"write {out} with the distinct products of the rows whose qty is greater than {threshold}, one per line, sorted"
        make = f"tail -q -n +2 {every} | awk -F, '$4 > {threshold} {{print $3}}' | sort -u > {out}"
    else:
        out = "out/report.csv"
        region = rng.choice(sorted({r for _, r, _, _ in rows}))
        result = ["date,product,qty"] + sorted(f"{d},{p},{q}" for d, r, p, q in rows if r == region)
        ask = (f"write {out}: the header line date,product,qty, then the date, product and qty of every row whose "
               f"region is {region}, sorted (as plain text lines, byte order)")
        make = (f"{{ echo date,product,qty; tail -q -n +2 {every} | awk -F, -v OFS=, '$2 == \"{region}\" "
                f"{{print $1,$3,$4}}' | sort; }} > {out}")
    prompt = (f"The directory data/ holds {n_files} CSV file(s) of sales (header: date,region,product,qty). Using the "
              f"shell, {ask}. Leave the input files as they are.")
    reference = ["export LC_ALL=C && mkdir -p out", make]
    return ShellTask("data", prompt, files, expected={out: lines(result)}, outputs=[out], reference=reference,
                     wrong=reference + [f"sed -i '$d' {out}"])


# -- config -------------------------------------------------------------------------------------

MAIN = '''import configparser
import json

from app.{helpers} import checksum, read_env

settings = json.load(open("config/app.json"))
db = configparser.ConfigParser()
db.read("config/db.ini")
env = read_env("config/runtime.env")
values = [settings["name"], settings["port"], db["database"]["host"], db["database"]["pool"], env["WORKERS"]]
print("OK", checksum(values))
'''
HELPERS = '''import zlib


def checksum(values):
    """A short digest of the values, as text."""
    return format(zlib.crc32("|".join(str(v) for v in values).encode()), "08x")


def read_env(path):
    """KEY=VALUE lines (no spaces around '='); '#' starts a comment."""
    env = {}
    for number, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or key != key.strip() or value != value.strip():
            raise ValueError(f"{path} line {number}: expected KEY=VALUE without spaces")
        env[key] = value
    return env
'''
FAULTS = ("json", "ini", "env", "import")


def _configs(name: str, port: int, host: str, pool: int, workers: int) -> dict[str, str]:
    """The well-formed configuration files holding these values."""
    return {"config/app.json": json.dumps({"name": name, "port": port, "debug": False}, indent=2) + "\n",
            "config/db.ini": f"[database]\nhost = {host}\npool = {pool}\n",
            "config/runtime.env": f"# worker processes\nWORKERS={workers}\nMODE=production\n"}


def _config_values(rng: random.Random) -> tuple[str, int, str, int, int]:
    return word(rng), rng.randint(1024, 65000), f"db-{word(rng, 2)}.internal", rng.randint(2, 64), rng.randint(1, 32)


def _digest(values: tuple[str, int, str, int, int]) -> str:
    return format(zlib.crc32("|".join(str(v) for v in values).encode()), "08x")


def config_task(rng: random.Random, level: int) -> ShellTask:
    """A program broken by ``level + 1`` configuration faults (see the module docstring)."""
    name, host, helpers = word(rng), f"db-{word(rng, 2)}.internal", f"{word(rng, 2)}_util"
    port, pool, workers = rng.randint(1024, 65000), rng.randint(2, 64), rng.randint(1, 32)
    faults = set(rng.sample(FAULTS, level + 1))
    good = {
        **_configs(name, port, host, pool, workers),
        "app/__init__.py": "",
        f"app/{helpers}.py": HELPERS,
        "app/main.py": MAIN.format(helpers=helpers),
        "run.sh": "#!/bin/sh\n# Starts the service's self-check; it must print OK and a digest.\nexec python3 -m app.main\n",
    }
    broken = dict(good)
    fixes: list[str] = []
    if "json" in faults:
        broken["config/app.json"] = good["config/app.json"].replace('"debug": false', '"debug": false,')
        fixes.append("""sed -i 's/"debug": false,/"debug": false/' config/app.json""")
    if "ini" in faults:
        broken["config/db.ini"] = good["config/db.ini"].replace("[database]", "[databse]")
        fixes.append("sed -i 's/^\\[databse\\]/[database]/' config/db.ini")
    if "env" in faults:
        broken["config/runtime.env"] = good["config/runtime.env"].replace(f"WORKERS={workers}", f"WORKERS = {workers}")
        fixes.append("sed -i 's/^WORKERS = /WORKERS=/' config/runtime.env")
    if "import" in faults:
        broken["app/main.py"] = good["app/main.py"].replace(f"app.{helpers}", f"app.{helpers}s")
        fixes.append(f"sed -i 's/app\\.{helpers}s /app.{helpers} /' app/main.py")
    digest = _digest((name, port, host, pool, workers))
    configs = [p for p in good if p.startswith("config/")]
    other = _config_values(random.Random(f"probe-{name}-{port}-{host}-{pool}-{workers}"))
    probe = (_configs(*other), f"OK {_digest(other)}\n")
    prompt = ("`bash run.sh` in /work should start this small service's self-check and print `OK` and a digest, but "
              f"it fails. Find what is broken in its configuration or code ({len(faults)} problem(s)) and repair it so "
              "that `bash run.sh` exits 0; change no value in the configuration, and do not edit run.sh.")
    return ShellTask("config", prompt, broken, expected={p: good[p] for p in configs}, solved=good, check="bash run.sh",
                     check_stdout=f"OK {digest}\n", restore=["run.sh"], probes=[probe],
                     reference=fixes + ["bash run.sh"], wrong=fixes[1:] + ["bash run.sh"])


# -- git ----------------------------------------------------------------------------------------

GIT_START = ("find . -mindepth 1 -delete\n"  # the history is the setup's alone: each commit writes its own files
             "export GIT_AUTHOR_NAME=Temper GIT_AUTHOR_EMAIL=temper@example.invalid GIT_COMMITTER_NAME=Temper "
             "GIT_COMMITTER_EMAIL=temper@example.invalid\n"
             "git init -q . && git symbolic-ref HEAD refs/heads/main && git config user.name Temper && "
             "git config user.email temper@example.invalid && git config commit.gpgsign false\n")


class History:
    """A git history built twice, the same: as the setup script that makes it in the sandbox, and
    as the objects trusted code computes (:class:`~trainer.families.shell.gitobjects.Repo`), so the
    verifier knows every commit's id from the task alone. Commits carry fixed dates and names."""

    def __init__(self) -> None:
        self.script = [GIT_START]
        self.repo = Repo()
        self.tree: dict[str, str] = {}
        self.count = 0

    def commit(self, subject: str, changes: dict[str, str | None]) -> None:
        for path, text in changes.items():
            if text is None:
                self.tree.pop(path)
                self.script.append(f"git rm -q -- '{path}'\n")
            else:
                self.tree[path] = text
                encoded = base64.b64encode(text.encode()).decode()
                self.script.append(f"mkdir -p \"$(dirname '{path}')\" && echo {encoded} | base64 -d > '{path}'\n")
        self.count += 1
        date = self.date()
        self.script.append(f"git add -A && GIT_AUTHOR_DATE='{date} +0000' GIT_COMMITTER_DATE='{date} +0000' "
                           f"git commit -q -m '{subject}'\n")
        self.repo.commit(self.tree, subject, date)

    def date(self) -> int:
        """The date of the history's last commit (seconds, UTC)."""
        return 1_700_000_000 + 60 * self.count

    def branch(self, name: str) -> None:
        """Start branch ``name`` at the current branch's last commit."""
        self.script.append(f"git branch {name}\n")
        self.repo.heads[name] = self.repo.heads[self.repo.branch]

    def checkout(self, name: str) -> None:
        self.script.append(f"git checkout -q {name}\n")
        self.repo.branch = name
        self.tree = self.repo.files(self.repo.heads[name])

    def setup(self) -> str:
        return "set -e\n" + "".join(self.script)

    def task(self, prompt: str, git: str, **fields: Any) -> ShellTask:
        """The task on this history, checked on the repository as ``git`` says (see
        :attr:`ShellTask.git`); the reference's repository is this one with, for ``commit`` and
        ``merge``, one more commit on main holding the reference's final tree."""
        after = self.repo.copy()
        spec = ShellTask("git", prompt, dict(self.tree), self.setup(), git=git, heads=dict(self.repo.heads),
                         before=self.repo.bundle(), **fields)
        if git != "unchanged":
            parents = [after.heads["main"], after.heads["feature"]] if git == "merge" else None
            after.commit(spec.final(), "Merge feature" if git == "merge" else "Restore", self.date() + 60, parents)
        return dataclasses.replace(spec, after=after.bundle())


def git_task(rng: random.Random, level: int) -> ShellTask:
    """One of three git operations over a history ``4 * 2**level`` commits deep."""
    depth = 4 * 2 ** level
    return rng.choice([recover_task, merge_task, bisect_task])(rng, depth)


def _notes(rng: random.Random, history: History, count: int) -> None:
    for i in range(count):
        history.commit(f"Update notes: {word(rng)} {word(rng)}",
                       {"NOTES.md": history.tree.get("NOTES.md", "# Notes\n") + f"- {word(rng)} {i}\n"})


def recover_task(rng: random.Random, depth: int) -> ShellTask:
    history = History()
    path = f"keys/{word(rng)}.txt"
    history.commit("Start the notes", {"NOTES.md": "# Notes\n"})
    _notes(rng, history, rng.randint(0, depth // 4))
    versions = [lines(words(rng, rng.randint(4, 10), 4)) for _ in range(rng.randint(2, 4))]
    history.commit(f"Add {path}", {path: versions[0]})
    for version in versions[1:]:
        _notes(rng, history, rng.randint(0, depth // 4))
        history.commit(f"Revise {word(rng)}", {path: version})
    _notes(rng, history, rng.randint(0, depth // 4))
    history.commit(f"Clean up {word(rng)}", {path: None})
    _notes(rng, history, max(1, depth - history.count))
    prompt = (f"This git repository's file {path} was deleted in an earlier commit. Restore it in the working tree "
              "with the content it had in the last commit that held it, and commit it on the branch main. Keep the "
              "history as it is: add commits, do not rewrite or drop any, and leave main checked out.")
    commit = f" && git add {path} && git commit -q -m 'Restore {path}'"
    return history.task(prompt, "commit", expected={path: versions[-1]}, outputs=[path], committed=[path],
                        reference=[f"mkdir -p keys && git show \"$(git rev-list -n 1 HEAD -- {path})^:{path}\" > {path}"
                                   + commit],
                        wrong=[f"mkdir -p keys && git show \"$(git log --diff-filter=A --format=%H -- {path})\":{path} "
                               f"> {path}" + commit])


def merge_task(rng: random.Random, depth: int) -> ShellTask:
    history = History()
    n_lists = 1 + min(3, depth // 8)
    names = [f"lists/{word(rng)}.txt" for _ in range(n_lists)]
    pool = words(rng, 12 * n_lists)
    base = {name: sorted(pool[12 * i:12 * i + 4]) for i, name in enumerate(names)}
    history.commit("Start the lists", {name: lines(items) for name, items in base.items()})
    _notes(rng, history, depth // 2)
    history.branch("feature")
    ours = {name: sorted(pool[12 * i + 4:12 * i + 8]) for i, name in enumerate(names)}
    theirs = {name: sorted(pool[12 * i + 8:12 * i + 12]) for i, name in enumerate(names)}
    for name in names:
        history.commit(f"Extend {name}", {name: lines(base[name] + ours[name])})
    history.checkout("feature")
    extra_path, extra = f"docs/{word(rng)}.md", lines(words(rng, 5, 4))
    for name in names:
        history.commit(f"Grow {name}", {name: lines(base[name] + theirs[name])})
    history.commit(f"Add {extra_path}", {extra_path: extra})
    history.checkout("main")
    expected = {name: lines(sorted(base[name] + ours[name] + theirs[name])) for name in names}
    prompt = ("Merge the branch `feature` into `main` in this git repository. Resolve every conflict in the files "
              "under lists/ by keeping each entry of both sides, once, in sorted order (one entry per line), and "
              "commit the merge: main's last commit must be the merge commit, whose parents are the last commits of "
              "main and of feature, and main must stay checked out.")
    resolve = ("export LC_ALL=C; git merge -q feature; for f in lists/*.txt; do "
               "grep -v -E '^(<<<<<<<|=======|>>>>>>>)' \"$f\" | sort -u > /tmp/m && cp /tmp/m \"$f\"; done; "
               "git add -A && git commit -q -m 'Merge feature'")
    return history.task(prompt, "merge", expected={**expected, extra_path: extra}, committed=[*expected, extra_path],
                        reference=[resolve, "git status --short"],
                        wrong=["git merge -q -X ours feature; git status --short"])


CALC = '''"""Totals of a ledger."""
{notes}

def total(values):
    result = 0
    for index in range(0, len(values)):
        result += values[index]
    return result


def average(values):
    return total(values) / len(values) if values else 0
'''
BUGS = (("range(0, len(values))", "range(1, len(values))"), ("result = 0", "result = 1"),
        ("result += values[index]", "result += abs(values[index])"))
CHECK = "from calc import average, total\n\nassert total([4, -2, 7]) == 9\nassert average([-3, 5]) == 1\nprint('ok')\n"


def bisect_task(rng: random.Random, depth: int) -> ShellTask:
    depth *= 2  # 7 to 63 candidate commits, each as likely to be the first bad one: a guess wins 1 in 7 at best
    history = History()
    notes = [f"# {word(rng)}: {word(rng, 2)}" for _ in range(4)]
    history.commit("Start the ledger", {"calc.py": CALC.format(notes="\n".join(notes)), "check_calc.py": CHECK})
    bad = rng.randint(1, depth - 1)
    old, new = rng.choice(BUGS)
    subjects = []
    broken = False
    for number in range(1, depth):
        notes[rng.randrange(len(notes))] = f"# {word(rng)}: {word(rng, 2)}"
        text = CALC.format(notes="\n".join(notes))
        broken = broken or number == bad
        subject = f"Update calc: {word(rng)} {word(rng)}"
        subjects.append(subject)
        history.commit(subject, {"calc.py": text.replace(old, new) if broken else text})
    first_bad = subjects[bad - 1]
    prompt = ("In this git repository `python3 check_calc.py` passes on the first commit and fails on the last. "
              "Find the first commit at which it fails and write that commit's subject line (one line) to the file "
              "FIRST_BAD (do not commit it). Leave the repository on the branch main at its last commit, with its "
              "history as it is.")
    find = ("git bisect start HEAD \"$(git rev-list --max-parents=0 HEAD)\" >/dev/null && "
            "git bisect run python3 check_calc.py >/dev/null 2>&1; "
            "git log -1 --format=%s refs/bisect/bad > /tmp/first && git bisect reset >/dev/null 2>&1 && cp /tmp/first FIRST_BAD")
    return history.task(prompt, "unchanged", expected={"FIRST_BAD": first_bad + "\n", "calc.py": history.tree["calc.py"]},
                        outputs=["FIRST_BAD"], reference=[find, "cat FIRST_BAD"],
                        wrong=[f"echo '{subjects[bad - 2 if bad > 1 else bad]}' > FIRST_BAD"])


GENERATORS = {"data": data_task, "config": config_task, "git": git_task}


def shell_task(family: str, seed: int, level: int) -> ShellTask:
    """The task of ``family`` for this seed and level (the same every time)."""
    if family not in GENERATORS:
        raise ValueError(f"family must be one of {sorted(GENERATORS)}, got {family!r}")
    return GENERATORS[family](random.Random(f"shell-{family}-{seed}-{level}"), max(0, min(int(level), LEVELS - 1)))
