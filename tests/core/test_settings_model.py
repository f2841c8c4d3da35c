"""The rank model of a settings object is built once and shares the built-in framework tables:
every analysis (every keystroke) asks for it, and the tables memoise what they match."""

from __future__ import annotations

import dataclasses
import pickle

from ddp_lsp.core.frameworks import BUILTIN, Api, Match, Meaning
from ddp_lsp.core.settings import Settings


def test_the_rank_model_is_built_once_per_settings() -> None:
    s = Settings()
    assert s.rank_model is s.rank_model
    assert s.rank_model.frameworks is BUILTIN  # no entries of the user's: the built-in model
    other = dataclasses.replace(s, rank_guard_names=("is_boss",))
    assert other.rank_model is not s.rank_model
    assert "is_boss" in other.rank_model.predicates | other.rank_model.names


def test_user_entries_make_their_own_model() -> None:
    api = Api(Match.FUNCTION, "is_leader", (Meaning.RANK_ZERO,), source="pyproject.toml")
    s = Settings(frameworks=(api,))
    model = s.rank_model.frameworks
    assert model is not BUILTIN and api in model.apis
    assert "is_leader" in s.rank_model.predicates


def test_derived_values_stay_out_of_pickles() -> None:
    s = Settings()
    assert hash(s.rank_model) == hash(s.rank_model)
    back = pickle.loads(pickle.dumps(s))
    assert back == s and "rank_model" not in vars(back)
    model = pickle.loads(pickle.dumps(BUILTIN))
    assert set(vars(model)) == {"apis"}  # no cached hash (string hashes differ by process)
    assert model == BUILTIN and hash(model) == hash(BUILTIN)
