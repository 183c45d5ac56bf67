"""Every method that retrieves through the shared Hybrid RAG index declares where that index departs
from the official SourceLearn retriever, the document splitting among it."""

from sourcebench.methods.awm import AWM
from sourcebench.methods.evidence import SHARED_INDEX_DEVIATIONS, shared_index_deviations
from sourcebench.methods.hybrid_rag import HybridRAG
from sourcebench.methods.kb_curator import KBCurator
from sourcebench.methods.rika import RIKA


def test_the_document_splitting_is_a_declared_deviation_of_the_shared_index():
    splitting = [d for d in SHARED_INDEX_DEVIATIONS if "reST titles" in d]
    assert len(splitting) == 1 and "Markdown '#' headings" in splitting[0] and "first 1,200" in splitting[0]


def test_every_method_on_the_shared_index_lists_its_deviations():
    assert HybridRAG.deviations == SHARED_INDEX_DEVIATIONS
    for cls in (AWM, RIKA, KBCurator):
        assert set(shared_index_deviations()) <= set(cls.deviations), cls.name
