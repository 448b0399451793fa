"""Retail customer scenarios (a `Task` each) generated from the database and a seed: one customer, one or two
requests, gold writes.

Each request type is a small function that picks an order (or none) that fits it and returns the
customer's goal, what they know, the gold write actions and the outputs the agent must state. Gold
actions are computed by running the real write tools on a scratch copy of the customer's records, so
a gold action can never be one the tools would reject. Refusal requests (cancel a delivered order,
return a pending one, cancel for a reason the policy does not accept, ...) have no gold actions.

    >>> from art_core.envs.retail.db import make_db
    >>> tasks = make_tasks(make_db(0), seed=0)
    >>> [len(tasks[s]) for s in ("train", "val", "test")]
    [600, 100, 100]
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from art_core.envs.retail import tools as T
from art_core.envs.retail.db import CANCEL_REASONS, _address
from art_core.envs.customer_service.domain import Action, Followup, Task

Database = dict[str, Any]
BAD_REASONS = (
    "I found a better price elsewhere",
    "the delivery is taking too long",
    "I changed my mind about the color",
)


@dataclass
class Part:
    """One request of a task, before it is rendered: see the module docstring."""

    kind: str
    goal: str  # for the LLM user's instruction, e.g. "cancel order #W1234567 because it is no longer needed"
    request: str  # the opening line for it
    known: dict[str, str]
    actions: list[Action] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    order_id: str | None = None


def _money(x: float) -> str:
    return f"{x:.2f}"


def _describe(line_or_variant: dict[str, Any], name: str) -> str:
    opts = ", ".join(f"{k} {v}" for k, v in line_or_variant["options"].items())
    return f"the {name} ({opts})"


def _describe_pm(pm: dict[str, Any]) -> str:
    if pm["source"] == "credit_card":
        return f"my {pm['brand']} credit card ending in {pm['last_four']}"
    return "my PayPal account" if pm["source"] == "paypal" else "my gift card"


def _address_text(a: dict[str, str]) -> str:
    return " ".join(v for v in (a["address1"], a["address2"], a["city"], a["state"], a["country"], a["zip"]) if v)


def _orders(db: Database, user: dict[str, Any], statuses: tuple[str, ...], taken: set[str]) -> list[dict[str, Any]]:
    return [db["orders"][o] for o in user["orders"] if db["orders"][o]["status"] in statuses and o not in taken]


def _swaps(rng: random.Random, db: Database, order: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Pick 1-2 lines that have another available variant, and a new variant for each."""
    options = []
    for line in order["items"]:
        others = [
            i
            for i, v in sorted(db["products"][line["product_id"]]["variants"].items())
            if v["available"] and i != line["item_id"]
        ]
        if others:
            options.append((line["item_id"], others))
    if not options:
        return [], []
    picked = rng.sample(options, min(len(options), rng.choice([1, 1, 2])))
    return [old for old, _ in picked], [rng.choice(others) for _, others in picked]


def _payer(
    rng: random.Random, user: dict[str, Any], amount: float, exclude: str | None = None
) -> dict[str, Any] | None:
    """A payment method of the user that can pay `amount` (gift cards need the balance)."""
    fits = [
        pm
        for pm in user["payment_methods"].values()
        if pm["id"] != exclude and (pm["source"] != "gift_card" or pm["balance"] >= amount)
    ]
    return rng.choice(sorted(fits, key=lambda p: p["id"])) if fits else None


def _line_names(db: Database, order: dict[str, Any], item_ids: list[str], new: bool = False) -> str:
    by_id = {line["item_id"]: line for line in order["items"]}
    if new:
        found = {}
        for line in order["items"]:
            found.update({i: (v, line["name"]) for i, v in db["products"][line["product_id"]]["variants"].items()})
        return " and ".join(_describe(found[i][0], found[i][1]) for i in item_ids)
    return " and ".join(_describe(by_id[i], by_id[i]["name"]) for i in item_ids)


# ---- request types: fn(rng, db, user, taken_orders) -> Part | None ----


def cancel(rng, db, user, taken):
    orders = _orders(db, user, ("pending",), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    reason = rng.choice(CANCEL_REASONS)
    part = Part(
        "cancel",
        f"cancel order {o['order_id']} because it is {reason}",
        "I'd like to cancel an order.",
        {"order_id": o["order_id"], "reason": reason},
        [Action(name="cancel_pending_order", kwargs={"order_id": o["order_id"], "reason": reason})],
        order_id=o["order_id"],
    )
    if rng.random() < 0.3:
        total = sum(p["amount"] for p in o["payment_history"] if p["transaction_type"] == "payment")
        part.goal += ", and find out how much money you will get back"
        part.outputs.append(_money(total))
    return part


def modify_address(rng, db, user, taken):
    orders = _orders(db, user, ("pending",), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    new = _address(rng)
    return Part(
        "modify_address",
        f"have order {o['order_id']} shipped to {_address_text(new)}",
        "I need to change the shipping address of an order.",
        {"order_id": o["order_id"], "address": _address_text(new)},
        [Action(name="modify_pending_order_address", kwargs={"order_id": o["order_id"], **new})],
        order_id=o["order_id"],
    )


def _swap_items(rng, db, user, taken, *, status, kind, tool, request, goal):
    """Swap some lines of one of the user's orders in `status` for other variants of the same products,
    paying any difference with a method that can cover it (modify pending items; exchange delivered ones)."""
    orders = _orders(db, user, (status,), taken)
    for o in rng.sample(orders, k=len(orders)):
        old, new = _swaps(rng, db, o)
        if not old:
            continue
        prices = {line["item_id"]: line["price"] for line in o["items"]}
        new_prices = {
            i: v["price"] for line in o["items"] for i, v in db["products"][line["product_id"]]["variants"].items()
        }
        pm = _payer(rng, user, max(0.0, sum(new_prices[i] for i in new) - sum(prices[i] for i in old)))
        if pm is None:
            continue
        old_names, new_names = _line_names(db, o, old), _line_names(db, o, new, new=True)
        return Part(
            kind,
            f"{goal(o['order_id'], old_names, new_names)}, settling any price difference with {_describe_pm(pm)}",
            request,
            {
                "order_id": o["order_id"],
                "items": old_names,
                "new_items": new_names,
                "payment_method": f"{_describe_pm(pm)} ({pm['id']})",
            },
            [
                Action(
                    name=tool,
                    kwargs={
                        "order_id": o["order_id"],
                        "item_ids": old,
                        "new_item_ids": new,
                        "payment_method_id": pm["id"],
                    },
                )
            ],
            order_id=o["order_id"],
        )
    return None


def modify_items(rng, db, user, taken):
    return _swap_items(
        rng,
        db,
        user,
        taken,
        status="pending",
        kind="modify_items",
        tool="modify_pending_order_items",
        request="I want to change some items in an order I haven't received yet.",
        goal=lambda order, old, new: f"in pending order {order}, change {old} to {new}",
    )


def modify_payment(rng, db, user, taken):
    for o in _orders(db, user, ("pending",), taken):
        paid = o["payment_history"][0]
        pm = _payer(rng, user, paid["amount"], exclude=paid["payment_method_id"])
        if pm is not None and len(o["payment_history"]) == 1:
            return Part(
                "modify_payment",
                f"pay order {o['order_id']} with {_describe_pm(pm)} instead",
                "Can I change how I pay for an order?",
                {"order_id": o["order_id"], "payment_method": f"{_describe_pm(pm)} ({pm['id']})"},
                [
                    Action(
                        name="modify_pending_order_payment",
                        kwargs={"order_id": o["order_id"], "payment_method_id": pm["id"]},
                    )
                ],
                order_id=o["order_id"],
            )
    return None


def modify_user_address(rng, db, user, taken):
    new = _address(rng)
    return Part(
        "modify_user_address",
        f"change your default address to {_address_text(new)}",
        "I moved and want to update my address.",
        {"address": _address_text(new)},
        [Action(name="modify_user_address", kwargs={"user_id": user["user_id"], **new})],
    )


def return_items(rng, db, user, taken):
    orders = _orders(db, user, ("delivered",), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    lines = rng.sample(o["items"], rng.randint(1, len(o["items"])))
    ids = [line["item_id"] for line in lines]
    gift = [pm for pm in user["payment_methods"].values() if pm["source"] == "gift_card"]
    pm = (
        user["payment_methods"][o["payment_history"][0]["payment_method_id"]]
        if not gift or rng.random() < 0.6
        else gift[0]
    )
    part = Part(
        "return",
        f"return {_line_names(db, o, ids)} from order {o['order_id']} with the refund going to {_describe_pm(pm)}",
        "I'd like to return some things I received.",
        {
            "order_id": o["order_id"],
            "items": _line_names(db, o, ids),
            "payment_method": f"{_describe_pm(pm)} ({pm['id']})",
        },
        [
            Action(
                name="return_delivered_order_items",
                kwargs={"order_id": o["order_id"], "item_ids": ids, "payment_method_id": pm["id"]},
            )
        ],
        order_id=o["order_id"],
    )
    if rng.random() < 0.5:
        part.goal += ", and ask how much the refund will be"
        part.outputs.append(_money(sum(line["price"] for line in lines)))
    return part


def exchange_items(rng, db, user, taken):
    return _swap_items(
        rng,
        db,
        user,
        taken,
        status="delivered",
        kind="exchange",
        tool="exchange_delivered_order_items",
        request="I want to exchange something I received.",
        goal=lambda order, old, new: f"exchange {old} from order {order} for {new}",
    )


def gift_card_balance(rng, db, user, taken):
    gift = [pm for pm in user["payment_methods"].values() if pm["source"] == "gift_card"]
    if not gift:
        return None
    return Part(
        "balance",
        "find out the balance of your gift card",
        "How much money is left on my gift card?",
        {},
        outputs=[_money(gift[0]["balance"])],
    )


def order_status(rng, db, user, taken):
    orders = _orders(db, user, ("pending", "processed", "delivered", "cancelled"), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    return Part(
        "status",
        f"find out the status of order {o['order_id']}",
        "What's going on with my order?",
        {"order_id": o["order_id"]},
        outputs=[o["status"]],
        order_id=o["order_id"],
    )


# refusals: the policy says no, so the gold list is empty and any write scores 0


def refuse_cancel(rng, db, user, taken):
    orders = _orders(db, user, ("processed", "delivered", "cancelled", "return requested", "exchange requested"), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    reason = rng.choice(CANCEL_REASONS)
    return Part(
        "refuse_cancel",
        f"cancel order {o['order_id']} because it is {reason}; if the agent says it cannot be done, accept that",
        "I'd like to cancel an order.",
        {"order_id": o["order_id"], "reason": reason},
        order_id=o["order_id"],
    )


def refuse_reason(rng, db, user, taken):
    orders = _orders(db, user, ("pending",), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    reason = rng.choice(BAD_REASONS)
    return Part(
        "refuse_reason",
        f"cancel order {o['order_id']} because {reason} (that is your only reason; don't make up another); "
        "if the agent says it cannot be done, accept that",
        "I want to cancel an order.",
        {"order_id": o["order_id"], "reason": reason},
        order_id=o["order_id"],
    )


def refuse_return(rng, db, user, taken):
    orders = _orders(db, user, ("pending", "processed", "cancelled", "return requested"), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    line = rng.choice(o["items"])
    pm = user["payment_methods"][o["payment_history"][0]["payment_method_id"]]
    return Part(
        "refuse_return",
        f"return {_describe(line, line['name'])} from order {o['order_id']}; if the agent says it cannot be done, accept that",
        "I want to return an item.",
        {
            "order_id": o["order_id"],
            "items": _describe(line, line["name"]),
            "payment_method": f"{_describe_pm(pm)} ({pm['id']})",
        },
        order_id=o["order_id"],
    )


def refuse_address(rng, db, user, taken):
    orders = _orders(db, user, ("processed", "delivered"), taken)
    if not orders:
        return None
    o = rng.choice(orders)
    new = _address(rng)
    return Part(
        "refuse_address",
        f"have order {o['order_id']} shipped to {_address_text(new)}; if the agent says it cannot be done, accept that",
        "Can you send my order to a different address?",
        {"order_id": o["order_id"], "address": _address_text(new)},
        order_id=o["order_id"],
    )


KINDS: list[tuple[Callable[..., Part | None], int]] = [
    (cancel, 12),
    (modify_address, 8),
    (modify_items, 10),
    (modify_payment, 7),
    (modify_user_address, 5),
    (return_items, 12),
    (exchange_items, 10),
    (gift_card_balance, 4),
    (order_status, 5),
    (refuse_cancel, 7),
    (refuse_reason, 4),
    (refuse_return, 5),
    (refuse_address, 4),
]


def _scratch(db: Database, user: dict[str, Any]) -> Database:
    """A copy of one customer's records: enough to run any write of theirs, far cheaper than the whole db."""
    mine = {"users": {user["user_id"]: user}, "orders": {o: db["orders"][o] for o in user["orders"]}}
    return json.loads(json.dumps(mine)) | {
        "products": db["products"]
    }  # a JSON round trip copies 3x faster than deepcopy


def _render(rng: random.Random, user: dict[str, Any], parts: list[Part], index: int) -> Task:
    first, last = user["name"]["first_name"], user["name"]["last_name"]
    identity = {"name": f"{first} {last}", "zip": user["address"]["zip"]}
    has_email = rng.random() < 0.7
    if has_email:
        identity["email"] = user["email"]
    known = dict(identity)  # every request's facts at once: what the LLM user's instruction lists
    for p in parts:
        for k, v in p.known.items():
            known[k] = f"{known[k]}; and for my other request, {v}" if k in known else v
    who = (
        f"If asked who you are, your email is {user['email']}."
        if has_email
        else f"You do not remember your email address; your zip code is {known['zip']}."
    )
    request = (
        parts[0].request if len(parts) == 1 else f"{parts[0].request} And I have a second thing to sort out after that."
    )
    goals = "; then ".join(p.goal for p in parts)
    instruction = (
        f"You are {first} {last}, a customer of an online store, chatting with its support agent. {who} "
        f"What you want: {goals}. Details you can give when asked: "
        + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in known.items())
        + ". Agree to a proposed change only if it is exactly what you want."
    )
    return Task(
        id=f"retail-{index:04d}",
        user_id=user["user_id"],
        request=f"Hi! {request}",
        instruction=instruction,
        # the scripted customer gives one request's facts at a time: the first's here, a later one's with it
        known_info={**identity, **parts[0].known},
        actions=[a for p in parts for a in p.actions],
        outputs=[o for p in parts for o in p.outputs],
        followups=[
            Followup(request=p.request, known_info=p.known, actions=len(p.actions), outputs=p.outputs)
            for p in parts[1:]
        ],
    )


def make_tasks(
    db: Database, seed: int = 0, n_train: int = 600, n_val: int = 100, n_test: int = 100
) -> dict[str, list[Task]]:
    """Tasks for `db`, split into train/val/test; deterministic in (db, seed)."""
    rng = random.Random(f"retail-tasks-{seed}")
    users = [db["users"][u] for u in sorted(db["users"])]
    fns, weights = zip(*KINDS)
    total = n_train + n_val + n_test
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < total:
        attempts += 1
        if attempts > 50 * total:
            raise RuntimeError(f"could only generate {len(tasks)} of {total} distinct tasks; use a bigger database")
        user = rng.choice(users)
        scratch = _scratch(db, user)
        parts: list[Part] = []
        taken: set[str] = set()
        for _ in range(2 if rng.random() < 0.2 else 1):
            part = rng.choices(fns, weights)[0](rng, scratch, scratch["users"][user["user_id"]], taken)
            if part is None or part.kind in {p.kind for p in parts}:
                continue
            for a in part.actions:  # run the writes: the next part sees their effects, and a bad gold action fails here
                T.TOOLS[a.name](scratch, **copy.deepcopy(a.kwargs))
            parts.append(part)
            if part.order_id:
                taken.add(part.order_id)
        if not parts:
            continue
        key = json.dumps(
            [user["user_id"], [(p.kind, p.order_id, [a.model_dump() for a in p.actions]) for p in parts]],
            sort_keys=True,
        )
        if key in seen:
            continue
        seen.add(key)
        tasks.append(_render(rng, user, parts, len(tasks)))
    rng.shuffle(tasks)
    return {"train": tasks[:n_train], "val": tasks[n_train : n_train + n_val], "test": tasks[n_train + n_val :]}
