"""``gpuctl completion bash|zsh``: a shell completion script made from gpuctl's own parser.

Subcommands, their options and choices (``--state``, ``-o``) complete; so do the second
words of ``nodes``, ``alerts`` and ``quota``. zsh loads the bash script through
``bashcompinit``. No dependency: the script is written from ``argparse``'s tables.

    source <(gpuctl completion bash)          # or add it to ~/.bashrc
    source <(gpuctl completion zsh)           # or add it to ~/.zshrc
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from gpuctl.client import EXIT_OK

VALUE_FLAGS_OF_TOP = ("--url", "--timeout")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser) -> list[str]:
    """Option strings, choices of options, and subcommand names of ``parser``."""
    words: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words.extend(action.choices)
            continue
        words.extend(s for s in action.option_strings if s.startswith("--") or len(s) == 2)
        if action.option_strings and action.choices:
            words.extend(str(c) for c in action.choices)
    return sorted(dict.fromkeys(words))


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion function for ``parser``'s program."""
    cases = []
    for name, sub in sorted(_subparsers(parser).items()):
        cases.append(f"    {name}) opts={shlex.quote(' '.join(_words(sub)))} ;;")
    top = " ".join(_words(parser))
    skip = "|".join(VALUE_FLAGS_OF_TOP)
    return f"""# gpuctl completion for bash (gpuctl completion bash)
_gpuctl() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" cmd="" skip=0 i w opts
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    if ((skip)); then skip=0; continue; fi
    case "$w" in
      {skip}) skip=1 ;;
      -*) ;;
      *) cmd="$w"; break ;;
    esac
  done
  case "$cmd" in
{chr(10).join(cases)}
    *) opts={shlex.quote(top)} ;;
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -F _gpuctl gpuctl
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """zsh: the bash function through ``bashcompinit``."""
    return (
        "# gpuctl completion for zsh (gpuctl completion zsh)\n"
        "autoload -U +X compinit && compinit\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser)
    )


def cmd_completion(args: argparse.Namespace) -> int:
    from gpuctl.main import build_parser

    parser = build_parser()
    print(bash_script(parser) if args.shell == "bash" else zsh_script(parser), end="")
    return EXIT_OK


def add_parser(sub: Any, formatter: Any) -> None:
    """Register ``completion`` (runs offline: no URL or token needed)."""
    p = sub.add_parser(
        "completion",
        help="print a bash or zsh completion script",
        description=__doc__,
        formatter_class=formatter,
    )
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=cmd_completion, needs_token=False)
