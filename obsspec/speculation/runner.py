"""The speculative turn loop: the next turn starts on a predicted observation, and is kept only
if the prediction was exactly right.

    loop = SpeculativeLoop(predictor, Gate(), SpeculationSettings(depth=2, breadth=2))
    trajectory = await run_episode(task, pool, engine, builder, limits, seed=seed, loop=loop)

An episode is a tree of policy replies (nodes). A node's `level` is how many unverified guesses
its context rests on; the root is generated on the verified context (level 0). When a reply
parses to a command:

    level 0   the command really runs (only a level-0 node ever runs one, so side effects are
              real and in order) and, if the gate agrees, the predictor is asked for up to
              `breadth` guesses of its output
    level k   (k < depth) only the predictor is asked

Each distinct guess becomes a child: a reply generated on context + reply + guess, at engine
priority k + 1, so real work is scheduled first. A reply that does not parse gets one child on
the fixed corrective observation; it is certain, so it does not add a level.

When the real output arrives, the child whose guess equals it exactly (canonical text) is
kept: its reply, finished or still generating, is the next turn (resubmitted at priority 0 if
still queued, `keep_priority`), and its subtree moves up a level, which lets deeper guesses
start. Every other child is cancelled with its subtree (the
engine aborts the requests). With no match, a fresh reply starts on the real context. Every
kept reply was therefore generated on exactly the context, and with the same seed, that the
sequential loop would have used: lossless. The driver (`SpeculativeEpisode.run`) reads like
the sequential `turn_loop`; the tree grows in callbacks as replies and predictions arrive.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.episode import (
    EpisodeEnd,
    EpisodeLimits,
    new_turn,
    observation_ids,
    record_result,
    turn_sampling,
)
from obsspec.agent.protocol import CORRECTIVE_OBSERVATIONS, parse_action
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.errors import ObsspecError
from obsspec.inference.base import Engine, Generation, GenerationProgress
from obsspec.speculation.gate import Ask, Gate
from obsspec.speculation.node import (
    History,
    Match,
    Node,
    copy_context,
    describe,
    distinct_guesses,
    exact_match,
    history_after,
)
from obsspec.speculation.predictor import WORLD_MODEL, Predictor, offered_by, running
from obsspec.speculation.settings import SpeculationSettings
from obsspec.speculation.world_model_record import note_world_model, score_world_model
from obsspec.trajectory import SpeculationRecord, Trajectory, Turn


class SpeculativeLoop:
    """A turn loop for `run_episode`. The gate is shared by every episode the loop runs, so
    its estimates improve as the worker goes."""

    def __init__(
        self,
        predictor: Predictor,
        gate: Gate | None = None,
        settings: SpeculationSettings | None = None,
        *,
        match: Match = exact_match,
    ) -> None:
        self.settings = settings or SpeculationSettings()
        self.predictor = predictor
        self.gate = gate or Gate(self.settings.gate)
        self.match = match

    async def __call__(
        self,
        trajectory: Trajectory,
        context: TokenContext,
        sandbox: Sandbox,
        engine: Engine,
        builder: ChatContextBuilder,
        limits: EpisodeLimits,
    ) -> None:
        episode = SpeculativeEpisode(self, trajectory, sandbox, engine, builder, limits)
        await episode.run(context)


class SpeculativeEpisode:
    def __init__(
        self,
        loop: SpeculativeLoop,
        trajectory: Trajectory,
        sandbox: Sandbox,
        engine: Engine,
        builder: ChatContextBuilder,
        limits: EpisodeLimits,
    ) -> None:
        self.loop = loop
        self.settings = loop.settings
        self.gate = loop.gate
        self.trajectory = trajectory
        self.sandbox = sandbox
        self.engine = engine
        self.builder = builder
        self.limits = limits
        self.tasks: set[asyncio.Task] = set()

    # --- the driver: the sequential loop, reading replies from the tree --------------------
    async def run(self, context: TokenContext) -> None:
        with self.gate.regimes.episode():  # the load the gate's regime is read from
            await self._run(context)

    async def _run(self, context: TokenContext) -> None:
        node = self.spawn(0, copy_context(context), level=0, guess=None)
        try:
            while True:
                gen = await self.real_reply(node)
                node.check_lossless(context)
                context.extend(gen.token_ids, generated=True, logprobs=gen.logprobs)
                turn, action = new_turn(node.index, gen, self.limits.action_format)
                turn.gen_start_s = node.started
                self.trajectory.turns.append(turn)
                if action.kind == "done":
                    raise EpisodeEnd("done")
                if action.kind == "invalid":
                    turn.observation = CORRECTIVE_OBSERVATIONS[self.limits.action_format]
                else:
                    await self.execute(node, turn, action.command)
                turn.observation_ids = observation_ids(
                    self.builder, gen.token_ids, turn.observation
                )
                context.extend(turn.observation_ids, generated=False)
                if node.index + 1 >= self.limits.max_turns:
                    raise EpisodeEnd("max_turns")
                node = self.advance(node, turn, context)
        finally:
            await self.cancel_all()

    async def real_reply(self, node: Node) -> Generation:
        """The node's reply, now that its context is verified."""
        assert node.generation is not None
        try:
            gen = await node.generation
        except ObsspecError:
            if node.born_level == 0:
                raise
            # Begun on a guess, it failed (e.g. refused while the engine was busy); the
            # sequential loop would ask on this same context now, so ask again as real work.
            gen = await self.regenerate(node)
        if node.born_level > 0 and gen.weight_version != self.engine.stats().weight_version:
            # Begun on a guess before the weights changed (RL syncs them between steps): the
            # sequential loop would have used the new weights, so this reply cannot be kept.
            gen = await self.regenerate(node)
        if node.parent_record is not None and not node.certain:
            node.parent_record.tokens_committed = len(gen.token_ids)
        if node.born_level == 0:
            self.gate.observe_generation(
                gen.timings.total_s,
                decode_s=gen.timings.decode_s,
                tokens=len(gen.token_ids),
                busy_fraction=self.gate.regimes.busy_fraction(node.span),
                load=node.load,
            )
        return gen

    async def regenerate(self, node: Node) -> Generation:
        """Generate the node's reply again as real work; whatever was built on the old reply
        (guesses, replies on them) goes, charged to the record whose guess the node rests on."""
        waste = node.parent_record or SpeculationRecord()
        for child in node.children:
            self.drop(child, waste)
        if node.predicting is not None:
            node.predicting.cancel()
        node.children, node.guesses, node.predicting, node.action = [], [], None, None
        node.wm_guesses = []
        node.record = SpeculationRecord(level=node.level)
        node.born_level = 0
        self.start_generation(node)
        assert node.generation is not None
        return await node.generation

    async def execute(self, node: Node, turn: Turn, command: str) -> None:
        """Run the command for real while the predictions (and replies on them) go on."""
        turn.speculation = node.record
        node.exec_started = turn.exec_start_s = time.monotonic()
        self.maybe_predict(node)  # no-op if already asked, e.g. while it was speculative
        context = node.speculation_context(self.trajectory.task_hash)
        regimes = self.gate.regimes
        with running(self.loop.predictor, context, command):  # others may wait for its output
            span = regimes.span()
            with regimes.executing():
                result = await self.sandbox.run(command, timeout_s=self.limits.command_timeout_s)
            record_result(turn, result, self.limits)
            self.gate.observe_execution(
                self.trajectory.task_hash,
                command,
                result.duration_s,
                busy_fraction=regimes.busy_fraction(span),
            )
            self.loop.predictor.observe(context, command, turn.observation)

    def advance(self, node: Node, turn: Turn, context: TokenContext) -> Node:
        """The real observation is in: keep the child that guessed it, drop the rest."""
        now = time.monotonic()
        record = node.record
        if node.predicting is not None and not node.predicting.done():
            node.predicting.cancel()
            record.exec_won = True
            self.gate.question_ended(
                node.decision, now - (node.predict_started or now), guessed=None
            )
        turn.predict_s, turn.predict_start_s = node.predict_s, node.predict_started or 0.0
        if turn.action == "command" and node.guesses:
            matched = any(self.loop.match(guess, turn.observation) for guess in node.guesses)
            record.matched = matched
            self.gate.observe_outcome(turn.command, record.source, matched)
        if turn.action == "command" and record.wm_asked:
            score_world_model(record, node.wm_guesses, turn.observation, self.loop.match)
        kept = next(
            (
                child
                for child in node.children
                if child.certain or self.loop.match(child.guess or "", turn.observation)
            ),
            None,
        )
        record.tokens_ahead = sum(n.tokens_so_far() for c in node.children for n in c.subtree())
        for child in node.children:
            if child is not kept:
                self.drop(child, record)
        node.children = []
        if kept is None:
            ran = turn.command if turn.action == "command" else None  # invalid: nothing ran
            commands = history_after(node.commands, ran, turn.observation)
            return self.spawn(
                node.index + 1, copy_context(context), level=0, guess=None, commands=commands
            )
        if not kept.certain:
            record.source = kept.source
            start = max(kept.started, node.exec_started or kept.started)
            record.overlap_s = max(0.0, min(kept.finished_at or now, now) - start)
        shift = kept.level  # 1 for a guess, 0 for a certain child
        for descendant in kept.subtree():
            descendant.level -= shift
        for descendant in kept.subtree():
            self.maybe_predict(descendant)
        self.keep_priority(kept, record)
        return kept

    def keep_priority(self, node: Node, record: SpeculationRecord) -> None:
        """A promoted reply is real work, but vLLM cannot change a request's priority. One still
        queued (no token yet) is aborted and submitted again at priority 0: same context, seed
        and sampling, so the same reply, and nothing generated is lost. One already generating
        is kept: vLLM's priority scheduler orders the requests waiting for a slot, and a running
        one is not behind them (it is preempted, largest priority value first, only when KV
        memory runs out)."""
        task = node.generation
        if task is None or task.done() or node.priority == 0 or node.progress.tokens > 0:
            return
        task.cancel()  # aborts the queued request
        self.start_generation(node, restart_clock=False)
        record.resubmitted = True

    # --- growing the tree ------------------------------------------------------------------
    def spawn(
        self,
        index: int,
        context: TokenContext,
        *,
        level: int,
        guess: str | None,
        commands: History = (),
    ) -> Node:
        node = Node(index, context, level, guess, commands)
        self.start_generation(node)
        return node

    def start_generation(self, node: Node, *, restart_clock: bool = True) -> None:
        sampling = turn_sampling(self.limits, self.trajectory.seed, node.index)
        node.progress, node.priority = GenerationProgress(), node.level
        if restart_clock:  # regenerated; a resubmitted reply was begun when first asked
            node.started = time.monotonic()
            node.span = self.gate.regimes.span()
            stats = self.engine.stats()
            node.load = stats.running + stats.waiting  # before this request joins them
        node.generation = task = self.start(
            self.engine.generate(
                node.context.ids, sampling, priority=node.level, progress=node.progress
            )
        )
        # Only the node's current request counts (a resubmitted one's old task is cancelled).
        task.add_done_callback(lambda _: self.on_reply(node) if task is node.generation else None)

    def on_reply(self, node: Node) -> None:
        gen = node.reply()
        if node.closed or gen is None:
            return
        node.finished_at = time.monotonic()
        node.action = parse_action(gen.text, self.limits.action_format)
        if node.index + 1 >= self.limits.max_turns:
            return
        if node.action.kind == "invalid":
            corrective = CORRECTIVE_OBSERVATIONS[self.limits.action_format]
            child = self.spawn(
                node.index + 1,
                self.child_context(node, corrective),
                level=node.level,
                guess=None,
                commands=node.commands,  # an invalid reply runs nothing
            )
            child.certain = True
            node.children.append(child)
        elif node.action.kind == "command":
            self.maybe_predict(node)

    def maybe_predict(self, node: Node) -> None:
        action = node.action
        if node.closed or node.predicting is not None or node.record.gated:
            return
        if action is None or action.kind != "command":
            return
        if node.level >= self.settings.depth or node.index + 1 >= self.limits.max_turns:
            return
        node.decision = decision = self.gate.decide(self.ask(node))
        node.record.gate, node.record.level = str(decision.reason), node.level
        if not decision.ask_world_model:
            node.record.gated = True
            if not hasattr(self.loop.predictor, "predict_cheap"):
                return  # nothing cheap to ask
        node.record.attempted = decision.ask_world_model  # cheap questions: when answered
        node.predicting = self.start(self.predict(node))

    async def predict(self, node: Node) -> None:
        assert node.action is not None and node.decision is not None
        command, record, costly = node.action.command, node.record, node.decision.ask_world_model
        start = node.predict_started = time.monotonic()
        try:
            async with asyncio.timeout(self.settings.predict_timeout_s):
                predictions = await self.ask_predictor(node, command, costly=costly)
        except Exception as e:  # a predictor failure costs the speculation, never the episode
            record.attempted = True
            record.failed = True
            record.error = describe(e, self.settings.predict_timeout_s)
            self.gate.question_ended(node.decision, time.monotonic() - start, guessed=False)
            return
        node.predict_s = time.monotonic() - start
        guesses = distinct_guesses(predictions, self.settings.breadth)
        if costly:
            self.gate.observe_prediction(node.predict_s)
            wm = offered_by(predictions, WORLD_MODEL)  # None: a cheaper predictor answered
            if wm is not None:
                self.gate.question_ended(node.decision, node.predict_s, guessed=bool(wm))
        elif not guesses:
            return  # the cheap predictors had nothing: no attempt
        record.attempted = True
        node.guesses = [text for text, _ in guesses]
        record.predictions = len(guesses)
        record.source = guesses[0][1].source if guesses else ""
        node.wm_guesses = note_world_model(record, predictions, self.settings.breadth)
        for text, prediction in guesses:
            if node.closed or not self.gate.should_branch(self.ask(node), prediction):
                continue
            child = self.spawn(
                node.index + 1,
                self.child_context(node, text),
                level=node.level + 1,
                guess=text,
                commands=history_after(node.commands, command, text),
            )
            child.source, child.parent_record = prediction.source, record
            node.children.append(child)

    async def ask_predictor(self, node: Node, command: str, *, costly: bool) -> list:
        """The predictor's guesses; costly: the world model may be asked (its busy time is
        measured), else only the cheap predictors (`predict_cheap`)."""
        context = node.speculation_context(self.trajectory.task_hash)
        predictor, n = self.loop.predictor, self.settings.breadth
        if not costly:
            return await predictor.predict_cheap(context, command, n)  # type: ignore[attr-defined]
        with self.gate.regimes.predicting():
            return await predictor.predict(context, command, n)

    # --- pruning and clean-up --------------------------------------------------------------
    def drop(self, node: Node, record: SpeculationRecord) -> None:
        """Cancel a discarded branch and everything built on it; charge its cost to record."""
        record.rollback = True
        for n in node.subtree():
            n.closed = True
            record.tokens_wasted += n.tokens_so_far()
            record.wm_tokens += n.record.wm_tokens  # guesses made on a discarded branch
            for task in (n.generation, n.predicting):
                if task is not None and not task.done():
                    task.cancel()

    async def cancel_all(self) -> None:
        """Nothing outlives the episode: every request is aborted and every task awaited."""
        pending = [task for task in self.tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def start(self, coroutine: Coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failed speculative reply is not an unhandled error

    # --- helpers ---------------------------------------------------------------------------
    def child_context(self, node: Node, observation: str) -> TokenContext:
        gen = node.reply()
        assert gen is not None
        context = copy_context(node.context)
        context.extend(gen.token_ids, generated=True, logprobs=gen.logprobs)
        context.extend(observation_ids(self.builder, gen.token_ids, observation), generated=False)
        return context

    def ask(self, node: Node) -> Ask:
        stats = self.engine.stats()
        elapsed = 0.0 if node.exec_started is None else time.monotonic() - node.exec_started
        assert node.action is not None
        return Ask(
            self.trajectory.task_hash, node.action.command, stats.running + stats.waiting, elapsed
        )
