"""Every exception class uamp defines derives from ``uamp_proto.errors.UampError``."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import attrs
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


def _attrs_errors() -> list[type[UampError]]:
    found = {
        cls
        for name in _modules()
        for cls in _exception_classes(name)
        if issubclass(cls, UampError) and "__attrs_attrs__" in vars(cls)
    }
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def test_the_walk_finds_attrs_declared_errors() -> None:
    names = {cls.__qualname__ for cls in _attrs_errors()}
    assert {"ProtocolError", "DecodeError", "ProviderError", "AuthError"} <= names


@pytest.mark.parametrize("cls", _attrs_errors(), ids=lambda cls: cls.__qualname__)
def test_attrs_declared_errors_behave_like_hand_written_ones(cls: type[UampError]) -> None:
    # Required fields get a value naming them; attrs does not check types.
    required = {
        f.name: f"<{f.name}>" for f in attrs.fields(cls) if f.init and f.default is attrs.NOTHING
    }
    exc = cls(**required)
    assert str(exc) == "<message>"
    assert hash(exc) == hash(exc) and exc != cls(**required)  # identity, like any exception
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls and str(copy) == "<message>"
    assert attrs.asdict(copy, recurse=False) == attrs.asdict(exc, recurse=False)
