"""Where ``plandag resume --provider --model --base-url`` points a stored run
(:class:`Endpoint`): each value left out keeps the run's own; a ``--base-url`` that is the
run's own model server is that URL given again with its user and password."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plandag.cli.common import fail
from plandag.errors import InputError

if TYPE_CHECKING:
    from plandag.runs.options import RunOptions
    from plandag.store import Store

__all__ = ["Endpoint"]


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """``plandag resume --provider --model --base-url``: the model endpoint a resumed run is
    pointed at; each value left out keeps the run's own.

    Attributes:
        provider: ``anthropic``, ``openai`` or ``offline``, or None.
        model: the planner's model (and the model steps' with ``openai``), or None.
        base_url: the API's base URL, or None.
    """

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    again: str | None = None

    @classmethod
    def given_for(
        cls, row: Any, provider: str | None, model: str | None, base_url: str | None
    ) -> Endpoint:
        """The endpoint of ``resume``'s options for the stored run ``row``: a ``--base-url``
        that is the run's own model server (user and password aside) is that URL given
        again (``again``: :func:`plandag.runs.stored.restored_options`), not a move;
        another one without a user and password points the run there. One with a user and
        password must be the run's own (so a mistyped host never gets them): exit 2
        otherwise."""
        from plandag.store.base_urls import split_userinfo

        if base_url is None:
            return cls(provider, model, None)
        own = sorted(
            {
                split_userinfo(str(section["base_url"]))[0].rstrip("/")
                for name in ("planner", "executor")
                if isinstance(section := row.options.get(name), Mapping) and section.get("base_url")
            }
        )
        bare, userinfo = split_userinfo(base_url)
        if bare.rstrip("/") in own:
            return cls(provider, model, None, again=base_url)
        if userinfo is not None:
            servers = ", ".join(own) if own else "(its provider's own API)"
            fail(
                f"--base-url {bare} is not the run's model server {servers}: a URL with a "
                "user and password is the run's own given again; to point the run at "
                "another server, give that server's URL without them"
            )
        return cls(provider, model, base_url)

    @property
    def given(self) -> bool:
        """Whether the run is pointed elsewhere (a provider, a model or another URL)."""
        return (self.provider, self.model, self.base_url) != (None, None, None)

    def row(self, row: Any) -> Any:
        """``row`` as the run's options are read for this resume: when the run moves to
        another base URL, what its old URL's user and password were is left out (they are
        not needed any more, and an environment that lost them must not stop the move)."""
        if self.base_url is None:
            return row
        from plandag.store.base_urls import CREDENTIALS_KEY

        options = dict(row.options)
        for name in ("planner", "executor"):
            section = options.get(name)
            if isinstance(section, Mapping) and CREDENTIALS_KEY in section:
                options[name] = {k: v for k, v in section.items() if k != CREDENTIALS_KEY}
        return dataclasses.replace(row, options=options)

    def apply(self, run_id: str, options: RunOptions) -> RunOptions:
        """``options`` with the planner and the model steps (``executor``) pointed here.

        A new provider without ``--model`` takes that provider's default model (openai has
        none: exit 2), its own base URL unless ``--base-url`` is given, and the model
        steps' default executor model. Exit 2 when the run calls no model at all, or the
        provider is unknown.
        """
        if not self.given:
            return options
        from plandag.cli.models_options import DEFAULT_MODELS, PROVIDERS
        from plandag.executors.access import executor_model_for

        if options.planner is None and options.executor is None:
            fail(
                f"run {run_id} calls no model (no planner, no llm or agent step): "
                "--provider, --model and --base-url do not apply to it"
            )
        if self.provider is not None and self.provider not in PROVIDERS:
            accepted = ", ".join(PROVIDERS[:-1]) + f" or {PROVIDERS[-1]}"
            fail(f"--provider {self.provider!r}: choose {accepted}")
        planner: dict[str, Any] | None = None
        executor: dict[str, Any] | None = None
        if options.planner is not None:
            planner, changed = self._moved(options.planner)
            name = self.model or (
                DEFAULT_MODELS.get(str(planner["provider"])) if changed else planner.get("model")
            )
            if not name:
                fail(f"--model is required with --provider {planner['provider']}")
            planner["model"] = name
        if options.executor is not None:
            executor, changed = self._moved(options.executor)
            if self.model is not None:
                executor["model"] = self.model
            elif changed:
                executor["model"] = planner["model"] if planner is not None else None
            if changed:
                executor["executor_model"] = None  # the new provider's default
            try:
                executor_model_for(
                    str(executor["provider"]), executor.get("model"), executor.get("executor_model")
                )
            except InputError as error:
                fail(f"run {run_id}: its plan has llm or agent steps: {error}")
        return dataclasses.replace(options, planner=planner, executor=executor)

    def _moved(self, current: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """``current`` (a stored planner or executor) with the provider and base URL given;
        whether the provider changed."""
        updated = dict(current)
        old = str(updated.get("provider") or "anthropic")
        new = self.provider or old
        updated["provider"] = new
        if self.base_url is not None:
            updated["base_url"] = self.base_url
        elif new != old:
            updated["base_url"] = None  # the new provider's own API
        return updated, new != old

    def keep(self, store: Store, run_id: str, row: Any, options: RunOptions) -> None:
        """Store the endpoint in the run's options (the run goes on with it; later resumes
        and approvals use it); nothing when none was given."""
        if not self.given:
            return
        from plandag.store.base_urls import stored_model_options

        stored = dict(row.options)
        stored["planner"] = dict(options.planner) if options.planner is not None else None
        stored["executor"] = dict(options.executor) if options.executor is not None else None
        store.update_run(run_id, options=stored_model_options(stored))  # no user, password
