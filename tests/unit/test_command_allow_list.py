"""The read-only allow-list and the rules that guard what it lets through."""

from __future__ import annotations

import pytest

from services.hitl.allow_list import AllowList, default_allow_list, shipped_entries
from services.hitl.command_options import Invocation, basename
from services.hitl.command_risk import analyse_command


def _inv(line: str) -> Invocation:
    name, *args = line.split()
    return Invocation(basename(name), tuple(args), line)


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        ("ls -la src", "ls"),
        ("/usr/bin/git status -s", "git status"),
        ("git -C sub --no-pager log -p", "git log"),
        ("python3.12 -m pytest -q tests", "python -m pytest"),
        ("ruff format --check src", "ruff format --check"),
        ("npm run test -- --watch=false", "npm run test"),
        ("make -C backend test lint V=1", "make test lint"),
    ],
)
def test_entries_match_programs_sub_commands_and_options(line: str, entry: str) -> None:
    assert default_allow_list().match(_inv(line)) == entry


@pytest.mark.parametrize(
    "line",
    [
        "python script.py",
        "python -m http.server",
        "ruff format src",  # writes: only the --check form is listed
        "npm run deploy",
        "make test deploy",  # every make target must be listed
        "make",
        "git gc --prune=now",
        "frobnicate --all",
    ],
)
def test_anything_else_is_not_on_the_list(line: str) -> None:
    assert default_allow_list().match(_inv(line)) is None


def test_a_template_list_replaces_the_shipped_one_and_can_include_it() -> None:
    own = AllowList.of(["ls", "  just   test "])
    assert own.entries == ("ls", "just test")
    assert own.match(_inv("git status")) is None
    assert own.match(_inv("just test --verbose")) == "just test"
    extended = AllowList.of(["@default", "just test", "ls"])
    assert extended.entries[: len(shipped_entries())] == shipped_entries()
    assert extended.match(_inv("git status")) == "git status"
    assert extended.entries.count("ls") == 1


def test_the_shipped_file_has_no_comments_or_blank_entries() -> None:
    entries = shipped_entries()
    assert len(entries) > 150 and all(e.strip() == e and not e.startswith("#") for e in entries)


def test_unknown_programs_ask_and_say_so() -> None:
    risk = analyse_command("frobnicate --all")
    assert risk.level == "risky" and risk.reasons == (
        "not on the read-only allow-list: frobnicate --all",
    )
    custom = analyse_command("frobnicate --all", allow=AllowList.of(["frobnicate"]))
    assert custom.safe and custom.allowed == ("frobnicate",)


def test_nested_code_is_judged_instead_of_its_shell() -> None:
    assert analyse_command("sh -c 'ls | wc -l'").allowed == ("ls", "wc")
    assert analyse_command("bash -lc 'frob'").reasons == ("not on the read-only allow-list: frob",)


# --- the rules guarding allow-listed programs -------------------------------------------------


@pytest.mark.parametrize(
    ("command", "level", "fragment"),
    [
        ("psql -c 'select 1; drop table x'", "dangerous", "database write (psql)"),
        ("psql -c 'select * from t where id in (select 1)'", "safe", ""),
        ("psql -c '\\copy t to out.csv'", "dangerous", "database client command (psql)"),
        ("mysql -e 'use app; show tables'", "safe", ""),
        ("sqlite3 app.db '.schema users'", "safe", ""),
        ("sqlite3 app.db 'insert into t values (1)'", "dangerous", "database write (sqlite3)"),
        ("mongosh --eval 'db.t.find()'", "safe", ""),
        ("mongosh app.js", "risky", "without a read-only query (mongosh)"),
        ("mongosh --eval 'db.t.aggregate([{$out: \"x\"}])'", "dangerous", "database write"),
        ("redis-cli -h cache -n 2 keys 'user:*'", "safe", ""),
        ("redis-cli set k v", "risky", "without a read-only query (redis-cli)"),
        ("redis-cli config set dir /tmp", "dangerous", "database write (redis-cli config)"),
        ("git config --global --get user.name", "safe", ""),
        ("git config --global user.name bot", "risky", "changes global git configuration"),
        ("git reset HEAD", "safe", ""),
        ("git reset 1a2b3c4d", "risky", "reset to a commit"),
        ("git reflog expire --all", "dangerous", "rewrites repository history"),
        ("git remote add fork https://x", "risky", "changes git remotes"),
        ("eslint --fix src", "risky", "rewrites files in place (eslint)"),
        ("gofmt -l -w .", "risky", "rewrites files in place (gofmt)"),
        ("yq -i '.a = 1' x.yaml", "risky", "rewrites files in place (yq)"),
        ("tree -o out.txt", "risky", "writes a file (tree -o)"),
        ("xxd in.bin out.hex", "risky", "output operand"),
        ("find . -fprint out.txt", "risky", "find -fprint"),
        ("sed 's/a/b/w out.txt' f", "risky", "sed script writes a file"),
        ("sed -e '1e id' f", "risky", "runs a command"),
        ("cp -n a b", "safe", ""),
        ("mv --no-clobber a b", "safe", ""),
        ("rsync -a --ignore-existing a/ b/", "risky", "not on the read-only allow-list"),
        ("install -m 644 a b", "risky", "may overwrite an existing file (install)"),
        ("ln -s a b", "risky", "creates a link (writes through it land on its target)"),
        ("export -n PATH", "safe", ""),
        ("export EDITOR=vim", "risky", "environment hijack (EDITOR)"),
        ("NODE_OPTIONS=--require=./x.js npm test", "risky", "environment hijack (NODE_OPTIONS)"),
        ("set -euo pipefail", "safe", ""),
        ("history 20", "safe", ""),
        ("docker ps", "risky", "infrastructure tool (docker)"),
        ("docker", "risky", "infrastructure tool (docker)"),  # no arguments at all
        ("podman", "risky", "infrastructure tool (podman)"),
        ("kubectl get pods", "risky", "infrastructure tool (kubectl)"),
        ("mvn deploy", "dangerous", "publishes a package (mvn deploy)"),
        ("docker push app", "dangerous", "publishes a package (docker push)"),
        ("gh release create v1", "dangerous", "publishes a package (gh release)"),
        ("gh release list", "risky", "not on the read-only allow-list"),
        ("gh pr view 3", "safe", ""),
    ],
)
def test_rules_judge_the_uses_that_are_not_read_only(
    command: str, level: str, fragment: str
) -> None:
    risk = analyse_command(command)
    assert risk.level == level, risk
    assert all(fragment in r for r in risk.reasons[:1]) if fragment else not risk.reasons
