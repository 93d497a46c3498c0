"""Storage backends. They read and write envelopes and never interpret event data."""

from threadlog.store.artifacts import ArtifactStore
from threadlog.store.embedded import EmbeddedStore, VerifyReport, default_home
from threadlog.store.index import IndexedThread

__all__ = ["ArtifactStore", "EmbeddedStore", "IndexedThread", "VerifyReport", "default_home"]
