"""The approve cycle of crates/nrllm-store/benches/hitl.rs, written for LangGraph.

One cycle: a new thread; turn 1 (a scripted model) calls one gated tool; the graph interrupts
before the tool runs and its checkpoint is on disk (SqliteSaver, WAL); the operator approves
(Command(resume=...)); the tool runs; turn 2 answers; the graph ends. No real model, as in ours.
Durability "sync": each checkpoint is written before the next step starts, the mode that matches
our "every effect journaled before it runs".

Prints one line: peer=langgraph synchronous=... runs=... cycles_per_s=... p50_ms=... p99_ms=...
"""

import argparse
import os
import sqlite3
import statistics
import time
import uuid
from typing import Literal

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

NOTES = []


def model(state: MessagesState):
    if isinstance(state["messages"][-1], ToolMessage):
        return {"messages": [AIMessage(content="done")]}
    call = {"id": "c1", "name": "write_note", "args": {"text": "x"}}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def route(state: MessagesState) -> Literal["gate", "__end__"]:
    return "gate" if getattr(state["messages"][-1], "tool_calls", None) else END


def gate(state: MessagesState):
    call = state["messages"][-1].tool_calls[0]
    decision = interrupt({"tool": call["name"], "args": call["args"]})
    if decision != "approve":
        return {"messages": [ToolMessage(content="denied", tool_call_id=call["id"])]}
    NOTES.append(call["args"]["text"])
    return {"messages": [ToolMessage(content="noted", tool_call_id=call["id"])]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--db", default="target/peers/langgraph.db")
    args = parser.parse_args()

    os.makedirs(os.path.dirname(args.db) or ".", exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(args.db + suffix):
            os.remove(args.db + suffix)
    conn = sqlite3.connect(args.db, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={args.synchronous.upper()}")
    saver = SqliteSaver(conn)
    saver.setup()

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("gate", gate)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route)
    builder.add_edge("gate", "model")
    graph = builder.compile(checkpointer=saver)

    cycles = []
    started = time.perf_counter()
    for _ in range(args.runs):
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        begun = time.perf_counter()
        first = graph.invoke(
            {"messages": [SystemMessage("You are careful."), HumanMessage("write a note")]},
            config,
            durability="sync",
        )
        assert "__interrupt__" in first, "the run did not wait for approval"
        done = graph.invoke(Command(resume="approve"), config, durability="sync")
        assert done["messages"][-1].content == "done", "the run did not finish"
        cycles.append((time.perf_counter() - begun) * 1000.0)
    elapsed = time.perf_counter() - started
    assert len(NOTES) == args.runs, "every approved call ran exactly once"

    cycles.sort()
    p99 = cycles[min(len(cycles) - 1, round((len(cycles) - 1) * 0.99))]
    print(
        f"peer=langgraph synchronous={args.synchronous} runs={args.runs} "
        f"cycles_per_s={args.runs / elapsed:.1f} p50_ms={statistics.median(cycles):.3f} "
        f"p99_ms={p99:.3f}"
    )


if __name__ == "__main__":
    main()
