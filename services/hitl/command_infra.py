"""Rules for infrastructure, cloud and publishing tools: they act beyond the checkout.

A container runtime, a cluster, a cloud account or a package registry is shared with other
people and holds state no ``git checkout`` brings back. Every call of these tools needs a
human (``infrastructure tool``); the ones that destroy or expose (``kubectl delete``,
``terraform destroy``, ``docker run --privileged``, ``npm publish``) are dangerous.
"""

from __future__ import annotations

import itertools
import re

from services.hitl.command_options import Context, Invocation, Rule, long_flags, operands

__all__ = ["INFRA_RULES", "PUBLISHERS"]

# Sub-command words that destroy state, in any position (`aws ec2 terminate-instances`).
_DESTROY = re.compile(
    r"^(delete|destroy|rm|rmi|remove|prune|purge|kill|uninstall|drain|terminate|rb|"
    r"flush|wipe|reset|taint|force-unlock|rollback)([-_].*)?$|^(delete|terminate|remove)-",
)
_INFRA = frozenset(
    {"docker", "podman", "nerdctl", "docker-compose", "kubectl", "oc", "helm", "kustomize"}
    | {"terraform", "tofu", "terragrunt", "pulumi", "aws", "gcloud", "gsutil", "bq", "az"}
    | {"ansible", "ansible-playbook", "vagrant", "packer", "nomad", "consul", "vault"}
    | {"eksctl", "doctl", "flyctl", "fly", "heroku", "vercel", "netlify", "firebase", "kind"}
    | {"minikube", "k3d", "skaffold", "serverless", "sls", "cdk", "sam", "argocd", "gh-ost"}
)
# Runtime options that hand the container the host.
_HOST_ESCAPE = re.compile(
    r"^--(privileged|pid=host|net=host|network=host|ipc=host|userns=host|uts=host)$"
    r"|^--cap-add=?(all|sys_admin)$|docker\.sock|^/:|^-v/:|^--volume=/:|^--device",
    re.IGNORECASE,
)
# (program, sub-command) that publish to a registry or a release page: not undoable.
PUBLISHERS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("npm", "pnpm", "yarn", "bun"), frozenset({"publish", "unpublish"})),
    **dict.fromkeys(("poetry", "uv", "flit", "hatch", "pdm"), frozenset({"publish"})),
    "twine": frozenset({"upload"}),
    "cargo": frozenset({"publish", "yank", "owner"}),
    "gem": frozenset({"push", "yank", "owner"}),
    "mvn": frozenset({"deploy", "release:perform"}),
    "gradle": frozenset({"publish"}),
    "gradlew": frozenset({"publish"}),
    "dotnet": frozenset({"nuget"}),
    "gh": frozenset({"release"}),
    "vsce": frozenset({"publish"}),
}


def _host_escape(inv: Invocation) -> bool:
    args = list(inv.args)
    pairs = [f"{a}{b}" for a, b in itertools.pairwise([*args, ""]) if a in ("-v", "-p")]
    return any(_HOST_ESCAPE.search(a) for a in [*args, *pairs])


def _infra(ctx: Context, inv: Invocation, depth: int) -> None:
    words = [w.lower() for w in operands(inv.args)]
    destroys = next((w for w in words[:4] if _DESTROY.match(w)), None)
    if inv.key in ("docker", "podman", "nerdctl") and _host_escape(inv):
        ctx.flag("dangerous", f"container gets the host ({inv.key}): {inv.display}")
    elif (
        destroys is not None
        or "--auto-approve" in long_flags(inv.args)
        or ("-auto-approve" in inv.args)
    ):
        ctx.flag("dangerous", f"destroys infrastructure ({inv.key} {destroys or 'apply'}): "
                 f"{inv.display}")  # fmt: skip
    elif inv.key in ("docker", "podman") and words[:1] == ["push"]:
        ctx.flag("dangerous", f"publishes a package ({inv.key} push): {inv.display}")
    else:
        ctx.flag("risky", f"infrastructure tool ({inv.key}): {inv.display}")


def publish_rule(ctx: Context, inv: Invocation, depth: int) -> bool:
    """Flag ``npm publish`` and friends; True when it did (the caller's rule stops)."""
    subs = PUBLISHERS.get(inv.key, frozenset())
    words = operands(inv.args)
    if inv.key == "gh" and words[1:2] in (["list"], ["view"], ["download"]):
        return False  # reading releases publishes nothing
    if words[:1] and words[0] in subs:
        ctx.flag("dangerous", f"publishes a package ({inv.key} {words[0]}): {inv.display}")
        return True
    return False


def _publisher(ctx: Context, inv: Invocation, depth: int) -> None:
    publish_rule(ctx, inv, depth)


# Package managers with a rule of their own (command_code) call ``publish_rule`` first.
_PUBLISH_ONLY = ("twine", "mvn", "gradle", "gradlew", "dotnet", "gh", "vsce", "flit", "hatch")
INFRA_RULES: dict[str, Rule] = {
    **dict.fromkeys(_INFRA, _infra),
    **dict.fromkeys(_PUBLISH_ONLY, _publisher),
}
