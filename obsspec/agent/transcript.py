"""A readable transcript of a trajectory, for people watching an episode."""

from __future__ import annotations

from obsspec.trajectory import Trajectory


def format_transcript(traj: Trajectory, instruction: str = "") -> str:
    lines = [f"task {traj.task_id} (seed {traj.seed}, model {traj.model})"]
    if instruction:
        lines += ["", instruction.strip()]
    for turn in traj.turns:
        cut = ", cut off" if turn.generation_finish == "length" else ""
        lines += [
            "",
            f"--- turn {turn.index + 1}: {len(turn.action_ids)} tokens in "
            f"{turn.gen_s:.1f} s{cut} ---",
            turn.reply.strip() or "(empty reply)",
        ]
        if turn.action == "command":
            lines += [f"$ {turn.command}", turn.observation, f"({turn.exec_s:.2f} s)"]
        elif turn.action == "invalid":
            lines += ["(no command)", turn.observation]
        else:
            lines += ["(the agent declared the task done)"]
    reward = "not verified" if traj.reward is None else f"{traj.reward:g}"
    lines += [
        "",
        f"finished: {traj.finish_reason}; reward: {reward}; agent {traj.agent_s:.1f} s, "
        f"sandbox start {traj.sandbox_start_s:.2f} s, verifier {traj.verifier_s:.1f} s",
    ]
    if traj.error:
        lines.append(f"error ({traj.error_kind or 'policy'}): {traj.error}")
    return "\n".join(lines)
