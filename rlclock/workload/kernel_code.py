"""A generated kernel's loads, stores and arithmetic, as :mod:`rlclock.workload.inductor` reads them from its source
and a trace keeps them with the kernel's launch (:attr:`rlclock.workload.trace.LaunchOp.code`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TRITON_PREFIX = "triton_"
"""Names of the kernels TorchInductor generates start with this."""


class InductorCodeError(ValueError):
    """Generated code this reader cannot follow (the kernel is then planned from its measured time)."""


@dataclass(frozen=True)
class Access:
    """One load or store of a generated kernel.

    Attributes:
        arg: The pointer argument it uses (``in_ptr0``, ``out_ptr1``, ``in_out_ptr0`` …).
        store: True for a store (an atomic add is a load and a store).
        elements: Distinct elements its index reaches over the kernel's iteration space.
        elem_bytes: Bytes per element of the pointer's type.
        loop: Which loop over a reduction dimension it sits in (0: outside any), for looped reductions.
        indirect: Its index reads another load's value (a gather or a scatter).
    """

    arg: str
    store: bool
    elements: float
    elem_bytes: int
    loop: int = 0
    indirect: bool = False


@dataclass(frozen=True)
class KernelCode:
    """What a generated Triton kernel does, read from its source (module docstring).

    Attributes:
        name: The kernel's name.
        kind: ``pointwise``, ``reduction`` (looped), ``persistent_reduction``, ``template``, ``foreach`` …
        numels: Size of each dimension of the iteration space (``(("x", 8192), ("r0_", 32000))``).
        accesses: Its loads and stores.
        ops_per_element: Arithmetic per element of the iteration space (SIMT operations).
        args: The kernel's parameters in order (pointers and sizes), as the launch passes them.
        inductor_bytes: Inductor's own estimate of the bytes moved, when it wrote one (``kernel_num_gb``).
        inductor_flops: Inductor's own FLOP count, when it wrote one (``kernel_flop``).
    """

    name: str
    kind: str
    numels: tuple[tuple[str, float], ...]
    accesses: tuple[Access, ...]
    ops_per_element: float
    args: tuple[str, ...] = ()
    inductor_bytes: float | None = None
    inductor_flops: float | None = None

    @property
    def iterations(self) -> float:
        """Points of the iteration space (the product of the numels)."""
        return float(math.prod(n for _, n in self.numels)) if self.numels else 1.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (:meth:`from_dict` reads it back)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "numels": [list(n) for n in self.numels],
            "accesses": [
                [a.arg, int(a.store), a.elements, a.elem_bytes, a.loop, int(a.indirect)] for a in self.accesses
            ],
            "ops_per_element": self.ops_per_element,
            "args": list(self.args),
            "inductor_bytes": self.inductor_bytes,
            "inductor_flops": self.inductor_flops,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelCode:
        """Read :meth:`to_dict`'s form.

        Raises:
            InductorCodeError: A field is missing or of the wrong kind.
        """
        try:
            return cls(
                str(d["name"]),
                str(d["kind"]),
                tuple((str(a), float(b)) for a, b in d["numels"]),
                tuple(
                    Access(str(a[0]), bool(a[1]), float(a[2]), int(a[3]), int(a[4]), bool(a[5])) for a in d["accesses"]
                ),
                float(d["ops_per_element"]),
                tuple(str(a) for a in d.get("args", ())),
                None if d.get("inductor_bytes") is None else float(d["inductor_bytes"]),
                None if d.get("inductor_flops") is None else float(d["inductor_flops"]),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InductorCodeError(f"generated kernel summary is malformed ({exc})") from None
