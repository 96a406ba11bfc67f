"""What a repository shows of itself (repr, str) never holds a password or a secret option's
value: reprs end up in logs, notebooks and bug reports."""

from __future__ import annotations

import zarrlake as zl
from zarrlake.connection import resolve_spec


def test_a_bucket_repositorys_spec_masks_its_secret_options(s3_location):
    location, options = s3_location
    options = {**options, "secret_access_key": "s3cr3t-value"}
    repo = zl.Repo.create(location, storage_options=options)
    for shown in (repr(repo.spec), str(repo.spec), repr(repo)):
        assert "s3cr3t-value" not in shown
    assert "('secret_access_key', '***')" in repr(repo.spec)
    assert location in repr(repo.spec) and "('region', 'us-east-1')" in repr(repo.spec)


def test_a_metastore_url_password_is_masked():
    spec = resolve_spec("s3://bucket/repo", "postgresql://writer:hunter22@db.example:5432/meta", {})
    assert "hunter22" not in repr(spec)
    assert "postgresql://writer:***@db.example:5432/meta" in repr(spec)
