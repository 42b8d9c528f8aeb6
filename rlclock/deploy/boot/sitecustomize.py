"""Run by every Python interpreter that ``rlclock apply`` starts (this folder is first on its ``PYTHONPATH``).

It attaches the deployment (:func:`rlclock.deploy.attach.install`: hooks go in once the script imports torch),
then runs the ``sitecustomize`` this one shadows, if there is one, so the environment behaves as it would
without rlclock. An interpreter that cannot import rlclock (another environment) is left as it is, with one line.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _attach() -> None:
    try:
        from rlclock.deploy.attach import install
    except Exception as exc:  # another Python environment: run the program untouched
        print(
            f"rlclock: this interpreter ({sys.executable}) cannot import rlclock ({exc}); it runs without the "
            "deployment",
            file=sys.stderr,
        )
        return
    install()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_attach()
_chain()
