"""CascadePredictor: ask the cheapest predictors first; the first confident answer wins.

    cascade = CascadePredictor([StateCachePredictor(), RulePredictor(), RepeatPredictor(), lm])

Each predictor is asked in order; the first prediction whose confidence reaches `threshold`
is returned (its `source` says who answered). When none is confident, the most confident
answer seen is returned, or nothing. `predict_cheap` asks only the predictors not marked
`costly` (a costly one, the world model, makes an engine work). Real observations are passed
to every predictor, and so is the news that a command began (the optional `running` hook,
for those that have it).

The answer is an `Answer`: beside the chosen predictions it keeps what each predictor asked
offered, by source (a predictor's `source` attribute, else its predictions' source), so the
world model can be scored on its own even when a cheaper predictor's answer was chosen.
"""

from __future__ import annotations

from collections.abc import Callable

from obsspec.speculation.predictor import Answer, Prediction, Predictor, SpeculationContext


class CascadePredictor:
    def __init__(self, predictors: list[Predictor], threshold: float = 0.5) -> None:
        self.predictors = predictors
        self.threshold = threshold

    async def predict(self, context: SpeculationContext, command: str, n: int = 1) -> Answer:
        return await self._ask(self.predictors, context, command, n)

    async def predict_cheap(self, context: SpeculationContext, command: str, n: int = 1) -> Answer:
        """The same, without the predictors marked `costly` (the world model): what the
        speculative runner asks when its gate says the world model's work would not pay."""
        cheap = [p for p in self.predictors if not getattr(p, "costly", False)]
        return await self._ask(cheap, context, command, n)

    async def _ask(
        self, predictors: list[Predictor], context: SpeculationContext, command: str, n: int
    ) -> Answer:
        best: Prediction | None = None
        offered: dict[str, list[Prediction]] = {}
        for predictor in predictors:
            predictions = await predictor.predict(context, command, n)
            source = getattr(predictor, "source", None) or (
                predictions[0].source if predictions else None
            )
            if source is not None:
                offered.setdefault(source, []).extend(predictions)
            if predictions and predictions[0].confidence >= self.threshold:
                return Answer(predictions[:n], offered)
            for prediction in predictions:
                if best is None or prediction.confidence > best.confidence:
                    best = prediction
        return Answer([best] if best is not None else [], offered)

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        for predictor in self.predictors:
            predictor.observe(context, command, observation)

    def running(self, context: SpeculationContext, command: str) -> Callable[[], None]:
        hooks = [getattr(p, "running", None) for p in self.predictors]
        ends = [hook(context, command) for hook in hooks if hook is not None]

        def end() -> None:
            for each in ends:
                each()

        return end


def default_cascade(last: Predictor | None = None, threshold: float = 0.5) -> CascadePredictor:
    """The state cache, then rules, then repeats (the same command's output earlier in the
    episode, while they prove right in the command's family), then `last` (the world model,
    or recorded answers) when given. The exact-context cache (world_model.cache) is not in
    it: the same context means the same commands so far, so every exact-context hit is also
    a state-cache hit."""
    from obsspec.world_model.repeat import RepeatPredictor
    from obsspec.world_model.rules import RulePredictor
    from obsspec.world_model.state_cache import StateCachePredictor

    predictors: list[Predictor] = [StateCachePredictor(), RulePredictor(), RepeatPredictor()]
    return CascadePredictor([*predictors, last] if last is not None else predictors, threshold)
