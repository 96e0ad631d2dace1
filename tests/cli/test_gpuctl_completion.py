"""``gpuctl completion bash|zsh`` (#18): the scripts generate offline and complete in a real
bash: subcommands, a subcommand's options and choices, skipping ``--url VALUE``."""

from __future__ import annotations

import subprocess

from gpuctl.main import main


def script(shell: str, capsys, monkeypatch, tmp_path) -> str:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no config, no token: still works
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
    monkeypatch.delenv("GPUCTL_URL", raising=False)
    capsys.readouterr()
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def complete(bash_script: str, *words: str) -> list[str]:
    """COMPREPLY of ``_gpuctl`` for the command line ``gpuctl WORDS`` (last word: the cursor's)."""
    quoted = " ".join(f"'{w}'" for w in ("gpuctl", *words))
    program = (
        f"{bash_script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _gpuctl; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


def test_bash_completion_completes(capsys, monkeypatch, tmp_path):
    text = script("bash", capsys, monkeypatch, tmp_path)
    assert "complete -F _gpuctl gpuctl" in text
    assert complete(text, "jo") == ["jobs"]
    assert "--me" in complete(text, "jobs", "--m") and "--watch" in complete(text, "jobs", "--w")
    assert complete(text, "jobs", "--state", "pen") == ["pending"]
    assert complete(text, "--url", "http://x", "nodes", "dr") == ["drain", "draining"]
    assert complete(text, "jobs", "-o", "ya") == ["yaml"]
    assert "version" in complete(text, "")


def test_zsh_script_is_the_bash_one_through_bashcompinit(capsys, monkeypatch, tmp_path):
    text = script("zsh", capsys, monkeypatch, tmp_path)
    assert "bashcompinit" in text and "complete -F _gpuctl gpuctl" in text
    bash_part = text.split("bashcompinit\n", 1)[1]
    assert complete(bash_part, "qu") == ["queues", "quota"]
