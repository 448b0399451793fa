"""The retail expert: a policy written in code that handles a customer the way policy.md says.

It starts from the customer's opening message and learns everything else from the conversation: it asks who
the customer is and finds their user id (by email, else by name and zip), asks for what the request needs,
reads the order and products with the read tools, declines what the policy forbids, proposes each change with
every id it involves and waits for a yes, then makes the change and states what the customer asked about (a
refund total, a balance, a status). It never writes an id it has not read in a customer message or a tool result.

    from art_core.envs.customer_service.policies import PolicyClient
    trajectory = await load_environment().rollout(PolicyClient(play), "expert", scenario)

A customer with two requests opens with the first and says a second will follow; the scripted customer asks it
once the first is dealt with ("Thank you. The other thing: ..."), and the expert reads the account again (the
first request may have changed it) and handles the second the same way.
"""

from __future__ import annotations

import re
from typing import Any, Generator

from art_core.envs.customer_service.policies import Call, CannotDemonstrate, Play, Say, ask, call
from art_core.envs.retail.db import CANCEL_REASONS

CONFIRM = "Shall I go ahead? (yes/no)"
# "447 Pine Street Apt 4 Tucson AZ USA 85777": a street ends with one of these words, a second line is a unit
_ADDRESS = re.compile(
    r"(?P<address1>\d+ [A-Za-z ]+? (?:Street|Avenue|Lane|Road|Drive|Court|Boulevard|Way))"
    r"(?: (?P<address2>(?:Suite|Apt|Unit) \d+))? (?P<city>[A-Za-z .]+) (?P<state>[A-Z]{2}) "
    r"(?P<country>[A-Za-z]+) (?P<zip>\d{5})"
)


def _find(pattern: str, text: str, what: str) -> str:
    m = re.search(pattern, text)
    if m is None:
        raise CannotDemonstrate(f"the customer did not give {what}: {text!r}")
    return m.group(1)


def _yes(reply: str) -> None:
    if not reply.lower().startswith("yes"):
        raise CannotDemonstrate(f"the customer did not agree: {reply!r}")


def _money(x: float) -> str:
    return f"{x:.2f}"


def _descriptions(text: str) -> list[tuple[str, dict[str, str]]]:
    """[(product name, options)] from "the T-Shirt (color red, size M) and the Backpack (...)"."""
    out = []
    for name, opts in re.findall(r"the (.+?) \(([^()]*)\)", text):
        out.append((name, dict(pair.split(" ", 1) for pair in opts.split(", "))))
    return out


def _payment_id(reply: str) -> str:
    return _find(r"Please use .*?\((\w+)\)\.", reply, "a payment method")


def _address(reply: str) -> dict[str, str]:
    text = _find(r"The address is (.+?)\.(?:\s|$)", reply, "an address")
    m = _ADDRESS.fullmatch(text)
    if m is None:
        raise CannotDemonstrate(f"cannot split the address {text!r} into its fields")
    return {k: v or "" for k, v in m.groupdict().items()}


def _address_words(a: dict[str, str]) -> str:
    return ", ".join(v for v in a.values() if v)


def play(opening: str) -> Play:
    """The expert's side of one retail conversation (see the module docstring)."""
    reply = yield from ask(
        "I'd be glad to help. First I need to find your account: could you tell me your email, or your first "
        "name, last name and zip code?"
    )
    email = re.search(r"My email is (\S+@\S+?)\.(?:\s|$)", reply)
    if email:
        user_id = yield from call("find_user_id_by_email", email=email.group(1))
    else:
        first, last = _find(r"My name is (\S+ \S+)\.", reply, "a name").split(" ")
        zip_ = _find(r"My zip code is (\d+)\.", reply, "a zip code")
        user_id = yield from call("find_user_id_by_name_zip", first_name=first, last_name=last, zip=zip_)
    user = yield from call("get_user_details", user_id=user_id)
    reply = yield from _last_reply(_handle(user, opening))
    if "second thing" in opening:
        request = _find(r"The other thing: (.+)$", reply, "their second request")
        user = yield from call("get_user_details", user_id=user_id)
        yield from _handle(user, request)


def _last_reply(play: Play) -> Generator[Say | Call, str, str]:
    """Run `play`; return the customer's reply to its last message."""
    reply, sent = "", None
    try:
        while True:
            turn = play.send(sent)  # type: ignore[arg-type]  # the first send(None) starts it
            sent = yield turn
            if isinstance(turn, Say):
                reply = sent
    except StopIteration:
        return reply


def _handle(user: dict[str, Any], opening: str) -> Play:
    """One request, by the procedure its words call for."""
    request = opening.lower()
    if "gift card" in request:
        yield from _balance(user)
    elif "cancel" in request:
        yield from _cancel(user)
    elif "shipping address" in request or "different address" in request:
        yield from _order_address(user)
    elif "update my address" in request:
        yield from _user_address(user)
    elif "how i pay" in request:
        yield from _payment(user)
    elif "change some items" in request:
        yield from _swap(user, "pending", "modify_pending_order_items")
    elif "exchange" in request:
        yield from _swap(user, "delivered", "exchange_delivered_order_items")
    elif "return" in request:
        yield from _return(user)
    elif "going on with my order" in request:
        yield from _status(user)
    else:
        raise CannotDemonstrate(f"no procedure for the request {opening!r}")


def _order(user: dict[str, Any], question: str) -> Play:
    """Ask `question` (it asks for the order id among other things); read the order. Returns (order, reply)."""
    reply = yield from ask(question)
    order_id = _find(r"The order id is (#\w+)\.", reply, "an order id")
    order = yield from call("get_order_details", order_id=order_id)
    if order["user_id"] != user["user_id"]:
        raise CannotDemonstrate(f"order {order_id} belongs to another customer")
    return order, reply


def _balance(user: dict[str, Any]) -> Play:
    cards = [pm for pm in user["payment_methods"].values() if pm["source"] == "gift_card"]
    if not cards:
        raise CannotDemonstrate("the customer has no gift card")
    lines = [f"your gift card {pm['id']} has a balance of {_money(pm['balance'])}" for pm in cards]
    yield from ask(f"I checked your account: {'; '.join(lines)}.")


def _status(user: dict[str, Any]) -> Play:
    order, _ = yield from _order(user, "Which order is it? Please give me the order id.")
    yield from ask(f"Order {order['order_id']} is {order['status']}.")


def _cancel(user: dict[str, Any]) -> Play:
    order, reply = yield from _order(
        user, "Which order would you like to cancel, and why? Please give me the order id and the reason."
    )
    reason = _find(r"The reason: (.+?)\.(?:\s|$)", reply, "a reason")
    oid, status = order["order_id"], order["status"]
    if status != "pending":
        yield from ask(
            f"I'm sorry, but order {oid} is {status}, and only a pending order can be cancelled, so I cannot cancel it."
        )
        return
    if reason not in CANCEL_REASONS:
        yield from ask(
            f"I'm sorry, but I can cancel an order only when it is no longer needed or was ordered by mistake, so I "
            f"cannot cancel order {oid}."
        )
        return
    total = sum(p["amount"] for p in order["payment_history"] if p["transaction_type"] == "payment")
    reply = yield from ask(
        f"Order {oid} is pending. I will cancel the whole order with the reason '{reason}'; its payments, "
        f"{_money(total)} in total, go back to the methods they came from. {CONFIRM}"
    )
    _yes(reply)
    yield from call("cancel_pending_order", order_id=oid, reason=reason)
    yield from ask(
        f"Done: order {oid} is cancelled. The total refund is {_money(total)}; a gift card is credited at once, "
        "other methods within 5 to 7 business days."
    )


def _order_address(user: dict[str, Any]) -> Play:
    order, reply = yield from _order(
        user, "Which order is it, and where should it go? Please give me the order id and the full new address."
    )
    oid, status = order["order_id"], order["status"]
    if status != "pending":
        yield from ask(
            f"I'm sorry, but order {oid} is {status}; only a pending order can be modified, so I cannot change where it goes."
        )
        return
    address = _address(reply)
    reply = yield from ask(f"I will change the shipping address of order {oid} to {_address_words(address)}. {CONFIRM}")
    _yes(reply)
    yield from call("modify_pending_order_address", order_id=oid, **address)
    yield from ask(f"Done: order {oid} will be shipped to {_address_words(address)}.")


def _user_address(user: dict[str, Any]) -> Play:
    reply = yield from ask("What is your new address? Please give me the full address.")
    address = _address(reply)
    reply = yield from ask(
        f"I will change the default address of your account to {_address_words(address)}. Orders already placed "
        f"keep theirs. {CONFIRM}"
    )
    _yes(reply)
    yield from call("modify_user_address", user_id=user["user_id"], **address)
    yield from ask(f"Done: your default address is now {_address_words(address)}.")


def _payment(user: dict[str, Any]) -> Play:
    order, reply = yield from _order(
        user,
        "Which order is it, and which payment method would you like to pay with instead? Please give me the order id.",
    )
    oid = order["order_id"]
    payments = [p for p in order["payment_history"] if p["transaction_type"] == "payment"]
    new = user["payment_methods"].get(_payment_id(reply))
    if order["status"] != "pending" or len(payments) != 1 or new is None:
        raise CannotDemonstrate(f"order {oid} cannot change its payment method")
    old, amount = payments[0]["payment_method_id"], payments[0]["amount"]
    if new["id"] == old or (new["source"] == "gift_card" and new["balance"] < amount):
        raise CannotDemonstrate(f"{new['id']} cannot pay order {oid}")
    reply = yield from ask(
        f"I will change the payment method of order {oid} from {old} to {new['id']}: {new['id']} pays "
        f"{_money(amount)} and {old} is refunded {_money(amount)}. {CONFIRM}"
    )
    _yes(reply)
    yield from call("modify_pending_order_payment", order_id=oid, payment_method_id=new["id"])
    yield from ask(f"Done: order {oid} is now paid with {new['id']}.")


def _lines(order: dict[str, Any], described: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    """The order's item lines the customer described, in their order."""
    out = []
    for name, options in described:
        found = [line for line in order["items"] if line["name"] == name and line["options"] == options]
        if len(found) != 1:
            raise CannotDemonstrate(f"{len(found)} lines of order {order['order_id']} match the {name} {options}")
        out.append(found[0])
    return out


def _return(user: dict[str, Any]) -> Play:
    order, reply = yield from _order(
        user,
        "Which order is it, which items would you like to return, and should the refund go to the original payment "
        "method or to a gift card? Please give me the order id.",
    )
    oid, status = order["order_id"], order["status"]
    if status != "delivered":
        yield from ask(
            f"I'm sorry, but order {oid} is {status}; only a delivered order can be returned, so I cannot start this return."
        )
        return
    lines = _lines(order, _descriptions(_find(r"It's about (.*?\))\.", reply, "the items")))
    pm = user["payment_methods"].get(_payment_id(reply))
    original = order["payment_history"][0]["payment_method_id"]
    if pm is None or (pm["id"] != original and pm["source"] != "gift_card"):
        raise CannotDemonstrate("the refund must go to the original payment method or a gift card")
    ids = [line["item_id"] for line in lines]
    total = sum(line["price"] for line in lines)
    reply = yield from ask(
        f"I will request a return of items {', '.join(ids)} of order {oid}; the refund of {_money(total)} goes to "
        f"{pm['id']}. {CONFIRM}"
    )
    _yes(reply)
    yield from call("return_delivered_order_items", order_id=oid, item_ids=ids, payment_method_id=pm["id"])
    yield from ask(
        f"Done: the return is requested and the total refund is {_money(total)}. You will get an email explaining "
        "how to send the items back."
    )


def _swap(user: dict[str, Any], status: str, tool: str) -> Play:
    """Items of a pending order changed (modify) or of a delivered one exchanged: same products, other variants."""
    verb = "exchange" if status == "delivered" else "change"
    order, reply = yield from _order(
        user,
        f"Which order is it, which items would you like to {verb}, and which new item would you like instead of "
        "each? Please give me the order id.",
    )
    oid = order["order_id"]
    if order["status"] != status:
        raise CannotDemonstrate(f"order {oid} is {order['status']}, not {status}")
    lines = _lines(order, _descriptions(_find(r"It's about (.*?\))\.", reply, "the items")))
    wanted = _descriptions(_find(r"I'd like (.*?\)) instead\.", reply, "the new items"))
    if len(wanted) != len(lines):
        raise CannotDemonstrate("the customer named a different number of new items")
    new = []
    for line, (name, options) in zip(lines, wanted):
        product = yield from call("get_product_details", product_id=line["product_id"])
        match = [v for v in product["variants"].values() if v["options"] == options]
        if (
            name != line["name"]
            or len(match) != 1
            or not match[0]["available"]
            or match[0]["item_id"] == line["item_id"]
        ):
            raise CannotDemonstrate(f"no available other variant of {line['name']} with {options}")
        new.append(match[0])
    diff = round(sum(v["price"] for v in new) - sum(line["price"] for line in lines), 2)
    owed = f"you pay {_money(diff)}" if diff > 0 else f"you get {_money(-diff)} back"
    reply = yield from ask(
        f"The price difference is {_money(diff)}: {owed}. Which payment method would you like to use for it?"
    )
    pm = user["payment_methods"].get(_payment_id(reply))
    if pm is None or (diff > 0 and pm["source"] == "gift_card" and pm["balance"] < diff):
        raise CannotDemonstrate("that payment method cannot settle the difference")
    old_ids, new_ids = [line["item_id"] for line in lines], [v["item_id"] for v in new]
    pairs = ", ".join(f"item {a} for item {b}" for a, b in zip(old_ids, new_ids))
    once = (
        "an order can have only one exchange" if status == "delivered" else "an order's items can be changed only once"
    )
    reply = yield from ask(
        f"I will {verb} in order {oid}: {pairs}, settling the difference of {_money(diff)} with {pm['id']}. Please "
        f"note that {once}. {CONFIRM}"
    )
    _yes(reply)
    yield from call(tool, order_id=oid, item_ids=old_ids, new_item_ids=new_ids, payment_method_id=pm["id"])
    done = (
        "the exchange is requested; you will get an email explaining how to send the items back"
        if status == "delivered"
        else f"order {oid} now holds the new items"
    )
    yield from ask(f"Done: {done}.")
