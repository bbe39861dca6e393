"""Every exception class uamp defines derives from ``uamp_proto.errors.UampError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from uamp_proto.errors import UampError

PACKAGES = ("uamp_proto", "uamp_trio", "uamp_agents")


def _modules() -> list[str]:
    names: list[str] = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
            if info.name.endswith("__main__"):
                continue
            names.append(info.name)
    return names


def _exception_classes(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module_name
    ]


def test_the_walk_finds_exception_classes_in_every_package() -> None:
    found = {name.split(".")[0] for name in _modules() if _exception_classes(name)}
    assert found == set(PACKAGES)


@pytest.mark.parametrize("module_name", _modules())
def test_every_exception_derives_from_uamp_error(module_name: str) -> None:
    strays = [
        cls.__qualname__
        for cls in _exception_classes(module_name)
        if not issubclass(cls, UampError)
    ]
    assert strays == [], f"{module_name}: exceptions outside UampError: {strays}"
