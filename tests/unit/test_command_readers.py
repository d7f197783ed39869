"""Allow-listed programs that run a command or write after all: readers with pager and
exec options, git's one-off configuration, checkouts that overwrite files, local work
that plants hooks or links, and a wrapper with nothing to wrap."""

from __future__ import annotations

import pytest

from services.hitl.command_git import config_verdict, looks_like_path
from services.hitl.command_options import given
from services.hitl.command_risk import analyse_command
from services.hitl.policy import evaluate

# (command, level, fragment of a reason)
JUDGED: list[tuple[str, str, str]] = [
    # git -c / --config-env: a config change; a program-naming key runs that program
    ("git -c core.pager='rm -rf ~' log", "dangerous", "git configuration runs a program (core"),
    ("git -c core.sshCommand=./x fetch", "dangerous", "runs a program (core.sshCommand)"),
    ("git -c core.fsmonitor=./x status", "dangerous", "runs a program (core.fsmonitor)"),
    ("git -c core.hooksPath=/tmp/h commit -m x", "dangerous", "(core.hooksPath)"),
    ("git -c diff.external=./x diff", "dangerous", "(diff.external)"),
    ("git -c filter.lfs.smudge=./x checkout main", "dangerous", "(filter.lfs.smudge)"),
    ("git -c protocol.ext.allow=always fetch", "dangerous", "(protocol.ext.allow)"),
    ("git -c alias.st='!rm -rf ~' st", "dangerous", "(alias.st)"),
    ("git --config-env=core.editor=ED commit", "dangerous", "(core.editor)"),
    ("git --config-env core.pager=PG log", "dangerous", "(core.pager)"),
    ("git -c alias.st=status st", "risky", "changes git configuration (-c alias.st)"),
    ("git -c core.pager=cat log", "risky", "changes git configuration (-c core.pager)"),
    ("git -c color.ui=false status", "risky", "changes git configuration (-c color.ui)"),
    ("git --exec-path=/tmp/x fetch", "dangerous", "helper programs from another directory"),
    ("git config core.pager 'sh -c id'", "dangerous", "runs a program (core.pager)"),
    ("git config set core.fsmonitor ./x", "dangerous", "runs a program (core.fsmonitor)"),
    ("git config --unset core.pager", "risky", "changes git configuration"),
    ("git config core.pager", "safe", ""),
    ("git grep -O'rm -rf ~' TODO", "dangerous", "git grep runs a pager on the files"),
    ("git grep -nO vim TODO", "dangerous", "git grep runs a pager on the files"),
    ("git grep -n TODO", "safe", ""),
    ("git fetch --upload-pack=./x origin", "dangerous", "given in an option (upload-pack)"),
    ("git pull -u ./x origin", "dangerous", "given in an option (upload-pack)"),
    ("git ls-remote --upload-pack=./x origin", "dangerous", "upload-pack"),
    ("git clone -c core.hooksPath=h https://x/r", "dangerous", "(clone -c)"),
    ("git fetch git@evil.example:r.git", "risky", "not a configured remote"),
    ("git pull ../other main", "risky", "not a configured remote"),
    ("git fetch origin main", "safe", ""),
    ("git pull --rebase origin main", "risky", "rewrites repository history"),
    ("GIT_CONFIG_COUNT=1 git log", "risky", "environment hijack (GIT_CONFIG_COUNT)"),
    ("GIT_PAGER='sh -c id' git log", "risky", "environment hijack (GIT_PAGER)"),
    ("GIT_PAGER=cat git log", "safe", ""),
    ("export PAGER=less", "safe", ""),
    # checkout: a tree-ish and paths, or a lone path, overwrite files
    ("git checkout main src/app.py", "dangerous", "git checkout discards uncommitted changes"),
    ("git checkout HEAD src tests", "dangerous", "discards uncommitted changes"),
    ("git checkout app.py", "dangerous", "discards uncommitted changes"),
    ("git checkout 'src/*.py'", "dangerous", "discards uncommitted changes"),
    ("git checkout ':/docs'", "dangerous", "discards uncommitted changes"),
    ("git checkout --pathspec-from-file=list.txt", "dangerous", "discards uncommitted changes"),
    ("git checkout -B main origin/main", "risky", "resets a branch (checkout -B)"),
    ("git checkout -b feature/x origin/main", "safe", ""),
    ("git checkout release/2", "safe", ""),
    ("git checkout v1.2.0", "safe", ""),
    ("git switch -C main", "risky", "resets a branch (switch -C)"),
    ("git branch -f main HEAD~3", "risky", "moves or overwrites a branch"),
    ("git branch -M main", "risky", "moves or overwrites a branch"),
    ("git reset main", "risky", "reset to a commit"),
    ("git reset ORIG_HEAD", "risky", "reset to a commit"),
    ("git reset HEAD src/app.py", "safe", ""),
    ("git reset src/", "safe", ""),
    # readers with a program option
    ("man -P cat ls", "dangerous", "runs a program given in an option (man)"),
    ("man -aP ./x ls", "dangerous", "runs a program given in an option (man)"),
    ("man --html=./x ls", "dangerous", "runs a program given in an option (man)"),
    ("man -C x.conf ls", "risky", "reads a configuration that may run programs (man)"),
    ("man 3 printf", "safe", ""),
    ("rg --pre ./x TODO", "dangerous", "runs a program given in an option (rg)"),
    ("rg --pre-glob '*.gz' TODO", "safe", ""),
    ("bat --pager=./x a.py", "dangerous", "runs a program given in an option (bat)"),
    ("ack --pager=./x TODO", "dangerous", "runs a program given in an option (ack)"),
    ("sort --compress-program=./x -o out.txt in.txt", "dangerous", "(sort)"),
    ("go test -toolexec=./x ./...", "dangerous", "runs a program given in an option (go)"),
    ("go install -toolexec=./x ./cmd", "dangerous", "runs a program given in an option (go)"),
    ("less '+!id' a.txt", "dangerous", "less runs a command (initial command +!id)"),
    ("less '+v' a.txt", "dangerous", "less runs a command"),
    ("less '+/x\n!id' a.txt", "dangerous", "less runs a command"),
    ("less +-oout.txt a.txt", "risky", "less initial command (+-oout.txt)"),
    ("less --log-file=x a.txt", "risky", "writes a file (less output option)"),
    ("less -Oout a.txt", "risky", "writes a file (less output option)"),
    ("less --lesskey-src=k a.txt", "risky", "reads a configuration that may run programs"),
    ("less +100 a.txt", "safe", ""),
    ("less '+?def main' a.py", "safe", ""),
    ("less +F -R a.log", "safe", ""),
    ("fd -e py -x rm -rf {} ;", "dangerous", "recursive delete: rm -rf {}"),
    ("fd -e py --exec-batch wc -l", "safe", ""),
    ("fd -xrm x", "dangerous", "runs a program given in an option (fd)"),
    ("pytest --basetemp /tmp/x", "dangerous", "pytest --basetemp empties the directory"),
    ("pytest --junit-xml out.xml", "risky", "writes a file (pytest output option)"),
    ("py.test --junitxml x.xml", "risky", "writes a file (pytest output option)"),
    ("python -m mypy --install-types", "risky", "package install/change (mypy --install-types)"),
    ("ruff check --output-file=x.json .", "risky", "writes a file (ruff output option)"),
    ("ruff check --fix -o x.json .", "risky", "rewrites files in place (ruff)"),
    ("date --set=12:00", "risky", "system configuration change (date --set)"),
    ("ss -tK", "risky", "terminates connections"),
    # awk, sed, database clients
    ("gawk --include=inplace 1 a.txt", "risky", "in-place file edit (awk -i inplace)"),
    ("awk -i lib.awk 1 a.txt", "risky", "awk program from a file (unread)"),
    ("awk -l ordchr 1 a.txt", "risky", "awk loads a native extension"),
    ("awk '{print $1 |& \"cat\"}' a.txt", "dangerous", "awk program runs shell commands"),
    ("awk '/error|warn/' a.log", "safe", ""),
    ("sed -e p -e '1e id' a.txt", "risky", "sed script writes a file or runs a command"),
    ("sed --file=x.sed a.txt", "risky", "sed script from a file (unread)"),
    ("psql --output=out.txt -c 'select 1'", "risky", "writes a file (psql output option)"),
    ("psql -c 'select 1' --command='delete from t'", "dangerous", "database write (psql)"),
    ("mysql --init-command='drop table t' -e 'select 1'", "dangerous", "database write (mysql)"),
    ("mariadb --pager=./x -e 'show tables'", "dangerous", "given in an option (mariadb)"),
    ("sqlite3 -init x.sql app.db 'select 1'", "risky", "without a read-only query (sqlite3)"),
    ("sqlite3 -cmd '.output x' app.db 'select 1'", "dangerous", "database write (sqlite3)"),
    ("mongosh -f x.js", "risky", "without a read-only query (mongosh)"),
    # shell: variables set without `=`, command lookup hijacked
    ("read -r PATH <<< /tmp/x", "risky", "environment hijack (PATH)"),
    ("read -a LD_PRELOAD", "risky", "environment hijack (LD_PRELOAD)"),
    ("printf -v HISTFILE /dev/null", "risky", "shell history change (HISTFILE)"),
    ("hash -p ./x ls", "risky", "environment hijack (hash -p)"),
    ("read -r PAGER <<< ./x", "risky", "environment hijack (PAGER)"),  # value unseen
    ("read GIT_EDITOR", "risky", "environment hijack (GIT_EDITOR)"),
    ("printf -v GIT_PAGER %s ./x", "risky", "environment hijack (GIT_PAGER)"),
    ("printf -v PAGER ./x", "risky", "environment hijack (PAGER)"),
    ("printf -v PAGER '%s\\n' cat", "risky", "environment hijack (PAGER)"),  # not plain
    ("printf -v GIT_PAGER %s cat", "safe", ""),
    ("printf -v PAGER less", "safe", ""),
    ("read -r name", "safe", ""),
    # local work that plants hooks or links
    ("cp -n x .git/hooks/post-checkout", "risky", "writes git hooks or metadata (.git)"),
    ("mv -n x -t .githooks", "risky", "writes git hooks or metadata (.git)"),
    ("cp -n x .git/config", "risky", "writes git hooks or metadata (.git)"),
    ("cp -n --link big.bin copy.bin", "risky", "creates a link"),
    ("ln -s ../shared shared", "risky", "creates a link"),
    ("cp -n .env.example .env", "safe", ""),
    ("mkdir -p .github/workflows", "safe", ""),
]


@pytest.mark.parametrize(("command", "level", "fragment"), JUDGED)
def test_each_form_is_judged(command: str, level: str, fragment: str) -> None:
    risk = analyse_command(command)
    assert risk.level == level, risk
    assert any(fragment in reason for reason in risk.reasons) or not fragment, risk.reasons


def test_a_program_several_rule_tables_know_gets_every_finding() -> None:
    risk = analyse_command("sort --compress-program=./x -o out.txt in.txt")
    assert risk.reasons == (
        "runs a program given in an option (sort): sort --compress-program=./x -o out.txt in.txt",
        "writes a file (sort -o): sort --compress-program=./x -o out.txt in.txt",
    )
    go = analyse_command("go install -toolexec=./x ./cmd")
    assert len(go.reasons) == 2 and "package install/change" in go.reasons[1]


@pytest.mark.parametrize(
    ("key", "value", "verdict"),
    [
        ("core.pager", "less -R", None),
        ("CORE.PAGER", "./x", "dangerous"),
        ("pager.log", "./x", "dangerous"),
        ("core.pager", None, "dangerous"),  # from the environment: the value is unseen
        ("alias.lg", "log --oneline", None),
        ("alias.lg", "!sh", "dangerous"),
        ("credential.https://x.helper", "store", "dangerous"),
        ("include.path", "/tmp/x", "dangerous"),
        ("user.name", "bot", None),
    ],
)
def test_config_keys_that_name_a_program(key: str, value: str | None, verdict: str | None) -> None:
    assert config_verdict(key, value) == verdict


def test_operands_that_look_like_paths() -> None:
    paths = ["app.py", "src/", "./x", ".", "..", "*.py", ":/docs", "docs/README.md"]
    branches = ["main", "feature/x", "v1.2.0", "HEAD~1", "-", "origin/main", "release/2"]
    assert all(map(looks_like_path, paths))
    assert not any(map(looks_like_path, branches))


def test_given_finds_every_spelling_of_an_option() -> None:
    names = frozenset({"-P", "--pager"})
    assert given(["-P", "cat"], names) and given(["-Pcat"], names)
    assert given(["-aP", "cat"], names) and given(["--pager=cat"], names)
    assert given(["-exec", "x"], frozenset({"-exec"}))
    assert not given(["--", "-P"], names) and not given(["-a", "P"], names)


@pytest.mark.parametrize("command", ["nohup", "xargs", "time", "nice -n 5", "env -u HOME nohup"])
def test_a_wrapper_with_nothing_to_wrap_asks_and_says_why(command: str) -> None:
    decision = evaluate("execute_command", {"command": command})
    assert decision.requires_approval
    assert decision.reason is not None and "not on the read-only allow-list" in decision.reason


def test_env_alone_prints_the_environment_unasked() -> None:
    decision = evaluate("execute_command", {"command": "env"})
    assert not decision.requires_approval
    assert decision.reason == "Read-only allow-list: env"
