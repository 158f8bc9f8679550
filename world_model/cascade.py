"""CascadePredictor: ask the cheapest predictors first; the first confident answer wins.

    cascade = CascadePredictor([CachePredictor(), RulePredictor(), lm_predictor])

Each predictor is asked in order; the first prediction whose confidence reaches `threshold`
is returned (its `source` says who answered). When none is confident, the most confident
answer seen is returned, or nothing. Real observations are passed to every predictor.

The answer is an `Answer`: beside the chosen predictions it keeps what each predictor asked
offered, by source (a predictor's `source` attribute, else its predictions' source), so the
world model can be scored on its own even when a cheaper predictor's answer was chosen.
"""

from __future__ import annotations

from obsspec.speculation.predictor import Answer, Prediction, Predictor, SpeculationContext


class CascadePredictor:
    def __init__(self, predictors: list[Predictor], threshold: float = 0.5) -> None:
        self.predictors = predictors
        self.threshold = threshold

    async def predict(self, context: SpeculationContext, command: str, n: int = 1) -> Answer:
        best: Prediction | None = None
        offered: dict[str, list[Prediction]] = {}
        for predictor in self.predictors:
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


def default_cascade(last: Predictor | None = None, threshold: float = 0.5) -> CascadePredictor:
    """Cache, then rules, then `last` (the world model, or recorded answers) when given."""
    from world_model.cache import CachePredictor
    from world_model.rules import RulePredictor

    predictors: list[Predictor] = [CachePredictor(), RulePredictor()]
    return CascadePredictor([*predictors, last] if last is not None else predictors, threshold)
