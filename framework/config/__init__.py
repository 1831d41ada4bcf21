"""Typed configuration: environments and table specs loaded from ``conf/``."""

from __future__ import annotations

from framework.config.loader import default_conf_dir, load_project
from framework.config.model import (
    AzureAuthMethod,
    AzureStorage,
    Environment,
    Layer,
    ProjectConfig,
    Runtime,
    Table,
    TableSpec,
)
from framework.config.secrets import SecretRef
from framework.config.types import Identifier, Model, Text

__all__ = [
    "AzureAuthMethod",
    "AzureStorage",
    "Environment",
    "Identifier",
    "Layer",
    "Model",
    "ProjectConfig",
    "Runtime",
    "SecretRef",
    "Table",
    "TableSpec",
    "Text",
    "default_conf_dir",
    "load_project",
]
