"""The README's Python example (the seed's two examples) runs as written:
url=None starts a local conch serve in a fresh runtime directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import SOURCE_DIR


def test_readme_example(xdg, tmp_path):
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        text = f.read()
    block = re.search(r"<!-- python-example -->\n```python\n(.*?)```", text,
                      re.S).group(1)
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "test_demo.py").write_text("def test_one():\n    assert 1\n")
    code = block.replace("/tmp/demo", str(demo))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "hello"
    assert "1 passed" in out.stdout
    assert lines[-1] == "pytest exited 0"
