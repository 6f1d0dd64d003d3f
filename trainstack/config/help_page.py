"""`python run.py --help` without composing the config.

Hydra's help composes the whole tree and then lists every config group by walking its config
repository, deep-copying it once per group and option (about 0.7 s of a 1.2 s `--help`). The
page is conf/hydra/help/trainstack.yaml's template with the groups of the packaged conf/ listed
from the filesystem: the same text, at the cost of reading one YAML file. Anything else next to
`--help` (overrides, --config-dir, another help page) goes to Hydra as before.
"""
from __future__ import annotations

import string
import sys
from pathlib import Path

HELP_OPTIONS = ("--help", "-h")
PROG_RESOLVER = "trainstack_prog"  # ${trainstack_prog:} in the page: how it was asked for


def prog() -> str:
    """`trainstack run` when the page was asked for through it (cli.py sets argv[0]), else `python run.py`."""
    return "trainstack run" if sys.argv[0].endswith("trainstack run") else "python run.py"


def register_prog() -> None:
    """For the page Hydra renders (`--help` next to overrides): the same program name as the fast page."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver(PROG_RESOLVER, prog, replace=True)


def config_groups(conf_dir: Path) -> dict[str, list[str]]:
    """group -> sorted options, as Hydra lists them for $APP_CONFIG_GROUPS (hydra/ groups left out)."""
    groups: dict[str, list[str]] = {}

    def walk(path: Path, prefix: str) -> None:
        for child in sorted(path.iterdir()):
            if not child.is_dir() or child.name.startswith((".", "_")):
                continue
            name = f"{prefix}{child.name}"
            if name == "hydra":
                continue
            options = sorted(f.stem for f in child.iterdir() if f.suffix == ".yaml" and f.is_file())
            if options:
                groups[name] = options
            walk(child, f"{name}/")

    walk(conf_dir, "")
    return groups


def render(conf_dir: Path) -> str:
    """The help page: the template with its header, footer and config groups filled in."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    page = yaml.load((conf_dir / "hydra" / "help" / "trainstack.yaml").read_text(encoding="utf-8"), Loader=loader)
    listing = "".join(f"{group}: {', '.join(options)}\n" for group, options in sorted(config_groups(conf_dir).items()))
    text = str(page["template"])
    for key in ("app_name", "header", "footer"):  # the ${hydra.help.*} interpolations the template uses
        text = text.replace("${hydra.help.%s}" % key, str(page.get(key, "")))
    text = text.replace("${%s:}" % PROG_RESOLVER, prog())
    return string.Template(text).substitute(APP_CONFIG_GROUPS=listing)


def print_if_asked(argv: list[str], conf_dir: Path) -> bool:
    """Print the page and return True when argv is just `--help` (or `-h`); else leave it to Hydra."""
    if len(argv) != 1 or argv[0] not in HELP_OPTIONS:
        return False
    import yaml

    try:
        text = render(conf_dir)
    except (OSError, KeyError, ValueError, TypeError, yaml.YAMLError):  # an edited template this renderer cannot fill: Hydra's
        return False
    print(text)
    return True
