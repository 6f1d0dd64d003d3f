"""The one module that talks to the Hub, through the real `huggingface_hub` client (imported here only,
inside functions, so the CLI stays fast).

The endpoint is `HF_ENDPOINT` (read when a client is made, so a fake Hub set in the environment after
import still wins); the token is the client's own: `HF_TOKEN` or the token cache (`hf auth login`).
trainstack never reads, passes, stores or prints it; error texts are scrubbed before they are shown.

Large files take the path the client picks, as for any `hf upload`: Xet (`hf_xet`: the file is
chunked, chunks the Hub already has are not sent again, so a checkpoint whose weights moved a little
costs a fraction of its size) unless `HF_HUB_DISABLE_XET=1`, then Git LFS (batch API, one streamed PUT
or a multipart upload of parts). Both read the file in place; the fake Hub implements both and the
tests drive both (docs/hub.md, "Large files").
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from trainstack import secrets
from trainstack.hub import layout
from trainstack.storage.hf_xet import bound_xet_memory


def transfer_path() -> str:
    """Which large-file path this process's client takes: "xet" or "lfs" (`HF_HUB_DISABLE_XET`, or no
    hf_xet on this platform). Recorded with each push."""
    from huggingface_hub.utils._runtime import is_xet_available

    return "xet" if is_xet_available() else "lfs"


class HubUnavailable(Exception):
    """The Hub could not be reached or answered with an error (message already scrubbed)."""


class StalePointer(Exception):
    """The branch moved between reading the pointer and committing (another writer): read again."""


@dataclass
class Entry:
    path: str
    size: int | None  # None: a folder


def describe_error(ex: BaseException) -> str:
    """One line for events and logs, with no credential in it."""
    text = f"{type(ex).__name__}: {ex}".replace("\n", " ")
    token = None
    try:
        from huggingface_hub import get_token

        token = get_token()
    except Exception:  # noqa: BLE001 - a broken token cache is not our error to report here
        pass
    text = secrets.scrub(text, extra=[token] if token else [])
    return text[:400]


def credentials_hint(ex: BaseException, repo_id: str) -> str | None:
    """What to do when the Hub refused the credentials (401/403): retrying cannot fix that, and the run
    would otherwise only show a list of failed pushes."""
    response = getattr(ex, "response", None)
    if getattr(response, "status_code", None) not in (401, 403):
        return None
    return (f"the Hub refused this process's credentials for {repo_id}: export HF_TOKEN (or `hf auth login`) "
            "with write access where the run executes (on Lium: where the commander runs) and relaunch the run; "
            "it pushes what the Hub is missing")


class HubClient:
    """One repo on one Hub endpoint."""

    def __init__(self, repo_id: str, private: bool = True, endpoint: str | None = None):
        from huggingface_hub import HfApi
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()  # the launcher's console is the trainer's; no upload bars in it
        bound_xet_memory()
        self.repo_id = repo_id
        self.private = private
        self.endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self.api = HfApi(endpoint=self.endpoint)
        self.transfer = transfer_path()
        self._ensured = False

    # --- repo ------------------------------------------------------------------------------
    def ensure_repo(self) -> None:
        """Create the repo when missing (once per client)."""
        if not self._ensured:
            self.api.create_repo(self.repo_id, private=self.private, exist_ok=True)
            self._ensured = True

    def head(self) -> str | None:
        """The main branch's commit, or None when the repo does not exist."""
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            return self.api.repo_info(self.repo_id, revision="main").sha
        except RepositoryNotFoundError:
            return None

    # --- reading ---------------------------------------------------------------------------
    def read_json(self, path: str, revision: str) -> Any | None:
        """A small JSON file at a revision, read into memory through the client's own HTTP stack (the
        `resolve` GET that hf_hub_download makes, with its retries; no cache dir); None when the file
        (or the repo) does not exist."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff

        url = hf_hub_url(self.repo_id, path, revision=revision, endpoint=self.endpoint)
        response = http_backoff("GET", url, headers=build_hf_headers(), follow_redirects=True)
        try:
            hf_raise_for_status(response)
        except (EntryNotFoundError, RepositoryNotFoundError):
            return None
        return json.loads(response.content.decode("utf-8"))

    def ls(self, path: str, revision: str = "main", recursive: bool = False) -> list[Entry]:
        """Entries under a folder; [] when it does not exist."""
        from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

        try:
            return [Entry(e.path, getattr(e, "size", None) if type(e).__name__ == "RepoFile" else None)
                    for e in self.api.list_repo_tree(self.repo_id, path_in_repo=path, revision=revision,
                                                     recursive=recursive)]
        except (EntryNotFoundError, RepositoryNotFoundError):
            return []

    def download(self, path: str, revision: str, local_dir: str) -> Path:
        """One file at a revision into local_dir/<path>."""
        return Path(self.api.hf_hub_download(self.repo_id, path, revision=revision, local_dir=local_dir))

    # --- writing ---------------------------------------------------------------------------
    def upload_folder(self, folder: str | Path, path_in_repo: str, allow: list[str], message: str) -> str:
        """Files of a local folder, read in place (no copy): small text files inline in the commit, the
        others on the large-file path (Xet or LFS), streamed from disk (memory does not grow with their
        size), then one commit.
        Returns the commit's id: its tree holds every file of this upload."""
        info = self.api.upload_folder(repo_id=self.repo_id, folder_path=str(folder), path_in_repo=path_in_repo,
                                      allow_patterns=allow, commit_message=message)
        return info.oid

    def commit(self, adds: dict[str, bytes], deletes: Iterable[str] = (), delete_folders: Iterable[str] = (),
               message: str = "", parent: str | None = None) -> str:
        """One atomic commit; with `parent`, refused (StalePointer) if main moved since it was read."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete
        from huggingface_hub.errors import HfHubHTTPError

        ops: list[Any] = [CommitOperationDelete(path_in_repo=p) for p in deletes]
        ops += [CommitOperationDelete(path_in_repo=p.rstrip("/") + "/", is_folder=True) for p in delete_folders]
        ops += [CommitOperationAdd(path_in_repo=p, path_or_fileobj=data) for p, data in adds.items()]
        try:
            return self.api.create_commit(self.repo_id, operations=ops, commit_message=message,
                                          parent_commit=parent).oid
        except HfHubHTTPError as ex:
            if ex.response is not None and ex.response.status_code in (409, 412) and parent is not None:
                raise StalePointer(describe_error(ex)) from None
            raise

    # --- the run's records -----------------------------------------------------------------
    def read_pointer(self, run_id: str) -> tuple[dict | None, str | None]:
        """(the run's pointer, the commit it was read at); (None, head) when the run has none."""
        head = self.head()
        if head is None:
            return None, None
        return self.read_json(layout.pointer(run_id), head), head
