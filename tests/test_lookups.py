"""``__any_of``: the same rows as ``__in``, on fields and relations, empty lists included."""

from __future__ import annotations

import pytest

from catalog.models import Dataset, DatasetField
from tests.factories import dataset as make_dataset

pytestmark = pytest.mark.django_db


def test_any_of_matches_in_on_keys_and_relations():
    datasets = [make_dataset(name=f"shop.public.t{i}", fields=("id", "name")) for i in range(4)]
    wanted = [datasets[0].pk, datasets[2].pk]
    assert set(Dataset.objects.filter(pk__any_of=wanted)) == {datasets[0], datasets[2]}
    by_any = set(DatasetField.objects.filter(dataset_id__any_of=wanted))
    assert by_any == set(DatasetField.objects.filter(dataset_id__in=wanted)) and len(by_any) == 4


def test_any_of_an_empty_list_matches_nothing_and_excludes_nothing():
    make_dataset(name="shop.public.t", fields=("id",))
    assert not Dataset.objects.filter(pk__any_of=[]).exists()
    assert Dataset.objects.exclude(pk__any_of=[]).count() == 1
