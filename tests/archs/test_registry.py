"""Issue 31: a family is one folder, analysis/archs/<family>/, whose adapter declares the family's model types once;
the registry, the pruned types registered with transformers and the family's test case all agree with it."""
import importlib

import pytest
from transformers import AutoConfig

from analysis import archs
from analysis.archs.base import Adapter
from family_cases import CASE_MODULES


@pytest.mark.parametrize("family", archs.FAMILIES)
def test_a_familys_declared_types_its_pruned_types_and_its_test_case_agree(family):
    adapter = archs.get_adapter(family)
    assert adapter.family == family and adapter.own_types
    assert not any(archs.is_pruned_type(t) for t in adapter.own_types)
    assert {t: archs.family_of(t) for t in adapter.model_types} == dict.fromkeys(adapter.model_types, family), \
        "a model type is claimed by two families"
    for pruned in adapter.pruned_types:   # registered by the family's install step (analysis.ready(), conftest)
        own = pruned.removeprefix(archs.PRUNED_PREFIX)
        assert own in adapter.own_types
        config = AutoConfig.for_model(pruned)
        assert config.model_type == pruned and isinstance(config, type(AutoConfig.for_model(own)))
    assert family in CASE_MODULES, "every family has a test case in tests/family_cases/"
    case = importlib.import_module(f"family_cases.{family}").CASE
    assert case.name == family
    model = case.make_model()
    assert model.config.model_type in adapter.own_types and archs.adapter_for(model) is adapter


def test_every_test_case_is_of_a_registered_family():
    names = {importlib.import_module(f"family_cases.{m}").CASE.name for m in CASE_MODULES}
    assert names == set(archs.FAMILIES)


def test_the_trainable_families_are_those_whose_adapter_builds_a_training_config():
    """TRAINABLE stays a literal (the CLI's --arch choices are built without importing any family); it must name
    exactly the adapters that implement `training_config`."""
    built = {f for f in archs.FAMILIES
             if type(archs.get_adapter(f)).training_config is not Adapter.training_config}
    assert set(archs.TRAINABLE) == built
