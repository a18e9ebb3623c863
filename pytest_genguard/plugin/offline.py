"""A model download attempted where the hub is off (`HF_HUB_OFFLINE=1`, as in `genguard gate`'s image) named: the
error transformers raises then says only that the files are not cached, not which model was asked for. And a model
folder that is not there (outside the project, not mounted into the gate's container) named with the option that
mounts it.

The failed test's exception chain is read, never imported into: a `huggingface_hub` error of the offline kind
(`LocalEntryNotFoundError`, `OfflineModeIsEnabled`, by class name; `HFValidationError` for a path taken for a hub id)
and the `repo_id` huggingface_hub's own frames were called with (`hf_hub_download(repo_id=...)`, its public
parameter).
"""

from __future__ import annotations

from types import TracebackType

__all__ = ["OFFLINE_ERRORS", "SECTION", "download_hint"]

OFFLINE_ERRORS = frozenset({"LocalEntryNotFoundError", "OfflineModeIsEnabled"})
SECTION = "genguard: a model download, offline"


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or current in found:
            continue
        found.append(current)
        pending += [current.__cause__, current.__context__]
    return found


def _repo_ids(tb: TracebackType | None) -> list[str]:
    ids: list[str] = []
    while tb is not None:
        frame = tb.tb_frame
        if str(frame.f_globals.get("__name__", "")).startswith("huggingface_hub"):
            repo_id = frame.f_locals.get("repo_id")
            if isinstance(repo_id, str) and repo_id not in ids:
                ids.append(repo_id)
        tb = tb.tb_next
    return ids


def download_hint(exc: BaseException) -> str | None:
    """What to say when `exc` comes of a hub download refused offline, or of a model folder that is not there (None
    when it does neither)."""
    chain = _chain(exc)
    ids = [repo for e in chain for repo in _repo_ids(e.__traceback__)]
    folders = [repo for repo in dict.fromkeys(ids) if repo.startswith(("/", "./", "../", "~"))]
    if folders and any(type(e).__name__ == "HFValidationError" for e in chain):
        return (
            f"The test loads the folder '{folders[0]}', which is not here (transformers then takes the path for a hub "
            "id). In genguard gate's container, a folder outside the project is there only when mounted: genguard "
            f"gate --models {folders[0]} (read-only, at the same path); or put it in the project."
        )
    if not any(type(e).__name__ in OFFLINE_ERRORS for e in chain):
        return None
    named = ", ".join(f"'{repo}'" for repo in dict.fromkeys(ids)) or "(its id was not found in the traceback)"
    return (
        f"The test tried to download the model {named} from the Hugging Face Hub, and the hub is off here "
        "(HF_HUB_OFFLINE=1; genguard gate runs with no network). Put the model in the project (a save_pretrained "
        "folder), or mount it read-only: genguard gate --models DIR (a folder, at the same path) or --hf-cache DIR "
        "(a Hugging Face cache that holds it)."
    )
