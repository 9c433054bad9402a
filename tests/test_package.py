"""mlm_core's public face: the flow's names re-exported, and importing the flow loads no lesson."""

import subprocess
import sys

from tests.conftest import ROOT

LOADED = """
import sys
sys.path.insert(0, {root!r})
import mlm_core.masking
print(" ".join(sorted(name for name in sys.modules if name.startswith(("mlm_core", "streamlit")))))
"""


def test_importing_the_flow_loads_no_lesson_and_no_streamlit(tmp_path):
    """A child process, so that nothing is imported yet: ``import mlm_core.masking`` runs the package's
    ``__init__`` (the flow's re-exports) and must load no ``mlm_core.lessons`` module, no figures and no UI."""
    proc = subprocess.run([sys.executable, "-c", LOADED.format(root=str(ROOT))], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = proc.stdout.split()
    assert "mlm_core.masking" in loaded and "mlm_core.training" in loaded  # the flow itself
    assert not [name for name in loaded if name.startswith(("mlm_core.lessons", "mlm_core.figures", "streamlit"))]


def test_the_package_re_exports_the_flow():
    import mlm_core
    from mlm_core.masking import mask_tokens
    from mlm_core.training import train

    assert mlm_core.mask_tokens is mask_tokens and mlm_core.train is train
    assert not hasattr(mlm_core, "make_question") and not hasattr(mlm_core, "lesson_zip")  # lessons: own modules
