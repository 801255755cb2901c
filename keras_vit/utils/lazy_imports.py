"""Package names that are imported on first use, so that importing a package (and the
`keras-vit` command line, which imports the light modules of several) does not import Keras
or TensorFlow before they are needed."""

import importlib
import sys
import types


class LazyPackage(types.ModuleType):
    """A package whose names (`_exports`: name -> the module that defines it, or the
    sub-package of that name) are imported on first access."""

    def __getattr__(self, name):
        module = self.__dict__.get("_exports", {}).get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = importlib.import_module(module)
        value = getattr(value, name, value)  # the name it defines, or the sub-package itself
        setattr(self, name, value)
        return value

    def __setattr__(self, name, value):
        # The import system binds a sub-module to its package's attribute of the same name;
        # where the package exports a function of that name from it (keras_vit.weights.export),
        # keep the function, as `from .export import export` in an eager __init__ would.
        if isinstance(value, types.ModuleType) and self.__dict__.get("_exports", {}).get(name) == value.__name__:
            value = getattr(value, name, value)
        super().__setattr__(name, value)

    def __dir__(self):
        return sorted({*self.__dict__, *self.__dict__.get("_exports", {})})


def lazy_package(name, exports):
    """Makes the package `name` (call it from its `__init__`) a `LazyPackage` of `exports`."""
    package = sys.modules[name]
    package._exports = dict(exports)
    package.__all__ = sorted({*exports, *getattr(package, "__all__", ())})
    package.__class__ = LazyPackage
