"""The retail tools: each is `fn(db, **kwargs)`, deterministic, and raises `ToolError` on bad input.

Reads return JSON-able values; writes change `db` in place and return the changed record. The tools
check arguments and database state (status preconditions, availability, balances), but not the
conversation rules of the policy (authenticate first, confirm before writing): those are the agent's job.

    >>> from art_core.envs.retail.db import make_db
    >>> db = make_db(0)
    >>> uid = find_user_id_by_email(db, next(iter(db["users"].values()))["email"])
"""

from __future__ import annotations

from typing import Any

from art_core.envs.retail.db import CANCEL_REASONS
from art_core.envs.tool_use.tools import ToolError, function_schema

Database = dict[str, Any]
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")


# ---- argument and lookup checks (every failure is a ToolError the agent can read) ----


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _str_list(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolError(f"{name} must be a list of strings")
    return value


def _user(db: Database, user_id: Any) -> dict[str, Any]:
    user = db["users"].get(_str("user_id", user_id))
    if user is None:
        raise ToolError(f"user {user_id} not found")
    return user


def _order(db: Database, order_id: Any) -> dict[str, Any]:
    order = db["orders"].get(_str("order_id", order_id))
    if order is None:
        raise ToolError(f"order {order_id} not found (order ids look like #W1234567)")
    return order


def _payment(db: Database, order: dict[str, Any], payment_method_id: Any) -> dict[str, Any]:
    pm = _user(db, order["user_id"])["payment_methods"].get(_str("payment_method_id", payment_method_id))
    if pm is None:
        raise ToolError(f"payment method {payment_method_id} not found for user {order['user_id']}")
    return pm


def _status(order: dict[str, Any], *allowed: str) -> None:
    if order["status"] not in allowed:
        raise ToolError(f"order {order['order_id']} is {order['status']!r}; this needs it to be {' or '.join(allowed)}")


def _lines(order: dict[str, Any], item_ids: Any) -> list[dict[str, Any]]:
    """The order's item lines for `item_ids` (each id once, each in the order)."""
    item_ids = _str_list("item_ids", item_ids)
    if not item_ids:
        raise ToolError("item_ids must not be empty")
    if len(set(item_ids)) != len(item_ids):
        raise ToolError("item_ids lists an item twice")
    by_id = {line["item_id"]: line for line in order["items"]}
    missing = [i for i in item_ids if i not in by_id]
    if missing:
        raise ToolError(f"items {missing} are not in order {order['order_id']}")
    return [by_id[i] for i in item_ids]


def _new_variants(db: Database, lines: list[dict[str, Any]], new_item_ids: Any) -> list[dict[str, Any]]:
    """The variants replacing `lines`: same product, a different option set, in stock."""
    new_item_ids = _str_list("new_item_ids", new_item_ids)
    if len(new_item_ids) != len(lines):
        raise ToolError("item_ids and new_item_ids must have the same length")
    out = []
    for line, new_id in zip(lines, new_item_ids):
        variants = db["products"][line["product_id"]]["variants"]
        if new_id not in variants:
            raise ToolError(f"item {new_id} is not a variant of product {line['product_id']} ({line['name']})")
        if new_id == line["item_id"]:
            raise ToolError(f"new item {new_id} is the same as the old one")
        if not variants[new_id]["available"]:
            raise ToolError(f"item {new_id} is not available")
        out.append(variants[new_id])
    return out


def _charge(pm: dict[str, Any], amount: float) -> None:
    """Gift cards move money at once; cards and paypal are settled outside the database."""
    if pm["source"] == "gift_card":
        if pm["balance"] < amount:
            raise ToolError(f"gift card {pm['id']} has a balance of {pm['balance']:.2f}, not enough for {amount:.2f}")
        pm["balance"] = round(pm["balance"] - amount, 2)


def _net_paid(order: dict[str, Any]) -> dict[str, float]:
    """Payment method -> what it has paid for the order and not been refunded (only those above 0), in order."""
    net: dict[str, float] = {}
    for p in order["payment_history"]:
        sign = {"payment": 1, "refund": -1}.get(p["transaction_type"], 0)
        net[p["payment_method_id"]] = round(net.get(p["payment_method_id"], 0.0) + sign * p["amount"], 2)
    return {method: amount for method, amount in net.items() if amount > 0}


def _refund(pm: dict[str, Any], amount: float) -> None:
    if pm["source"] == "gift_card":
        pm["balance"] = round(pm["balance"] + amount, 2)


def _address(fields: dict[str, Any]) -> dict[str, str]:
    return {k: _str(k, fields[k]) for k in ADDRESS_FIELDS}


# ---- read tools ----


def find_user_id_by_email(db: Database, email: str) -> str:
    email = _str("email", email).strip().lower()
    for user in db["users"].values():
        if user["email"] == email:
            return user["user_id"]
    raise ToolError(f"no user with email {email}")


def find_user_id_by_name_zip(db: Database, first_name: str, last_name: str, zip: str) -> str:
    first, last, z = (
        _str(k, v).strip().lower() for k, v in (("first_name", first_name), ("last_name", last_name), ("zip", zip))
    )
    for user in db["users"].values():
        if (user["name"]["first_name"].lower(), user["name"]["last_name"].lower(), user["address"]["zip"]) == (
            first,
            last,
            z,
        ):
            return user["user_id"]
    raise ToolError(f"no user named {first_name} {last_name} with zip {zip}")


def get_user_details(db: Database, user_id: str) -> dict[str, Any]:
    return _user(db, user_id)


def get_order_details(db: Database, order_id: str) -> dict[str, Any]:
    return _order(db, order_id)


def get_product_details(db: Database, product_id: str) -> dict[str, Any]:
    product = db["products"].get(_str("product_id", product_id))
    if product is None:
        raise ToolError(f"product {product_id} not found (list_all_product_types gives the ids)")
    return product


def list_all_product_types(db: Database) -> dict[str, str]:
    return {p["name"]: p["product_id"] for p in sorted(db["products"].values(), key=lambda p: p["name"])}


# ---- write tools ----


def cancel_pending_order(db: Database, order_id: str, reason: str) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "pending")
    if reason not in CANCEL_REASONS:
        raise ToolError(f"reason must be one of {list(CANCEL_REASONS)}")
    # Each method gets back what it still has paid: after a payment change the first method was refunded already.
    for method, amount in _net_paid(order).items():
        _refund(_payment(db, order, method), amount)
        order["payment_history"].append({"transaction_type": "refund", "amount": amount, "payment_method_id": method})
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    return order


def modify_pending_order_address(
    db: Database, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "pending")
    order["address"] = _address(
        dict(address1=address1, address2=address2, city=city, state=state, country=country, zip=zip)
    )
    return order


def modify_pending_order_items(
    db: Database, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "pending")
    lines = _lines(order, item_ids)
    new = _new_variants(db, lines, new_item_ids)
    pm = _payment(db, order, payment_method_id)
    diff = round(sum(v["price"] for v in new) - sum(line["price"] for line in lines), 2)
    if diff > 0:
        _charge(pm, diff)
    else:
        _refund(pm, -diff)
    if diff != 0:
        kind = "payment" if diff > 0 else "refund"
        order["payment_history"].append({"transaction_type": kind, "amount": abs(diff), "payment_method_id": pm["id"]})
    for line, v in zip(lines, new):
        line.update(item_id=v["item_id"], price=v["price"], options=dict(v["options"]))
    order["status"] = "pending (item modified)"  # items can be changed once; the policy says so
    return order


def modify_pending_order_payment(db: Database, order_id: str, payment_method_id: str) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "pending")
    payments = [p for p in order["payment_history"] if p["transaction_type"] == "payment"]
    if len(payments) != 1:
        raise ToolError("only an order paid with a single payment can change its payment method")
    old = payments[0]
    pm = _payment(db, order, payment_method_id)
    if pm["id"] == old["payment_method_id"]:
        raise ToolError(f"order {order['order_id']} is already paid with {pm['id']}")
    _charge(pm, old["amount"])
    _refund(_payment(db, order, old["payment_method_id"]), old["amount"])
    order["payment_history"] += [
        {"transaction_type": "payment", "amount": old["amount"], "payment_method_id": pm["id"]},
        {"transaction_type": "refund", "amount": old["amount"], "payment_method_id": old["payment_method_id"]},
    ]
    return order


def modify_user_address(
    db: Database, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    user = _user(db, user_id)
    user["address"] = _address(
        dict(address1=address1, address2=address2, city=city, state=state, country=country, zip=zip)
    )
    return user


def return_delivered_order_items(
    db: Database, order_id: str, item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "delivered")
    lines = _lines(order, item_ids)
    pm = _payment(db, order, payment_method_id)
    original = order["payment_history"][0]["payment_method_id"]
    if pm["id"] != original and pm["source"] != "gift_card":
        raise ToolError(f"a refund goes to the original payment method ({original}) or to a gift card")
    order["status"] = "return requested"
    order["return_items"] = sorted(line["item_id"] for line in lines)  # sorted: the order of ids carries no meaning
    order["return_payment_method_id"] = pm["id"]
    return order


def exchange_delivered_order_items(
    db: Database, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    _status(order, "delivered")
    lines = _lines(order, item_ids)
    new = _new_variants(db, lines, new_item_ids)
    pm = _payment(db, order, payment_method_id)
    diff = round(sum(v["price"] for v in new) - sum(line["price"] for line in lines), 2)
    if diff > 0 and pm["source"] == "gift_card" and pm["balance"] < diff:
        raise ToolError(f"gift card {pm['id']} has a balance of {pm['balance']:.2f}, not enough for {diff:.2f}")
    pairs = sorted(zip((line["item_id"] for line in lines), (v["item_id"] for v in new)))
    order["status"] = "exchange requested"
    order["exchange_items"] = [old for old, _ in pairs]
    order["exchange_new_items"] = [new_id for _, new_id in pairs]
    order["exchange_payment_method_id"] = pm["id"]
    order["exchange_price_difference"] = diff
    return order


def transfer_to_human_agents(db: Database, summary: str) -> str:
    _str("summary", summary)
    return "Transfer successful: a human agent will take over this conversation."


TOOLS = {
    fn.__name__: fn
    for fn in (
        find_user_id_by_email,
        find_user_id_by_name_zip,
        get_user_details,
        get_order_details,
        get_product_details,
        list_all_product_types,
        cancel_pending_order,
        modify_pending_order_address,
        modify_pending_order_items,
        modify_pending_order_payment,
        modify_user_address,
        return_delivered_order_items,
        exchange_delivered_order_items,
        transfer_to_human_agents,
    )
}
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    }
)


# ---- OpenAI function schemas ----


def _schema(name: str, description: str, **params: tuple[str, str]) -> dict[str, Any]:
    """params: name -> (JSON type, description); "array" means a list of strings."""
    props = {}
    for p, (typ, desc) in params.items():
        props[p] = (
            {"type": "array", "items": {"type": "string"}, "description": desc}
            if typ == "array"
            else {"type": typ, "description": desc}
        )
    return function_schema(name, description, props, additionalProperties=False)


_ADDRESS = {
    "address1": ("string", "street line, e.g. '12 Oak Street'"),
    "address2": ("string", "second line, e.g. 'Apt 4', or ''"),
    "city": ("string", "city"),
    "state": ("string", "two-letter state code, e.g. 'TX'"),
    "country": ("string", "country, e.g. 'USA'"),
    "zip": ("string", "zip code, e.g. '78701'"),
}
_ORDER = ("string", "order id including the leading '#', e.g. '#W1234567'")
_PM = ("string", "payment method id from the user's details, e.g. 'gift_card_1234567'")

TOOL_SCHEMAS = [
    _schema(
        "find_user_id_by_email", "Find a user's id from their email address.", email=("string", "the user's email")
    ),
    _schema(
        "find_user_id_by_name_zip",
        "Find a user's id from their first name, last name and zip code.",
        first_name=("string", "first name"),
        last_name=("string", "last name"),
        zip=("string", "zip code"),
    ),
    _schema(
        "get_user_details",
        "Get a user's profile: name, email, address, payment methods and order ids.",
        user_id=("string", "user id, e.g. 'ava_lopez_1234'"),
    ),
    _schema("get_order_details", "Get an order: items, status, address, fulfillments and payments.", order_id=_ORDER),
    _schema(
        "get_product_details",
        "Get a product and all its variants (item ids, options, availability, price).",
        product_id=("string", "product id (see list_all_product_types)"),
    ),
    _schema("list_all_product_types", "List every product name with its product id."),
    _schema(
        "cancel_pending_order",
        "Cancel a pending order and refund its payments. The user must confirm first.",
        order_id=_ORDER,
        reason=("string", "either 'no longer needed' or 'ordered by mistake'"),
    ),
    _schema(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. The user must confirm first.",
        order_id=_ORDER,
        **_ADDRESS,
    ),
    _schema(
        "modify_pending_order_items",
        "Swap items of a pending order for other variants of the same products, paying or "
        "refunding the difference; possible once per order. The user must confirm first.",
        order_id=_ORDER,
        item_ids=("array", "item ids to replace"),
        new_item_ids=("array", "the new item ids, same positions"),
        payment_method_id=_PM,
    ),
    _schema(
        "modify_pending_order_payment",
        "Pay a pending order with another of the user's payment methods. The user must confirm first.",
        order_id=_ORDER,
        payment_method_id=_PM,
    ),
    _schema(
        "modify_user_address",
        "Change a user's default address. The user must confirm first.",
        user_id=("string", "user id"),
        **_ADDRESS,
    ),
    _schema(
        "return_delivered_order_items",
        "Request a return of delivered items; the refund goes to the original payment "
        "method or a gift card. The user must confirm first.",
        order_id=_ORDER,
        item_ids=("array", "item ids to return"),
        payment_method_id=_PM,
    ),
    _schema(
        "exchange_delivered_order_items",
        "Request an exchange of delivered items for other variants of the same products; "
        "possible once per order. The user must confirm first.",
        order_id=_ORDER,
        item_ids=("array", "item ids to exchange"),
        new_item_ids=("array", "the new item ids, same positions"),
        payment_method_id=_PM,
    ),
    _schema(
        "transfer_to_human_agents",
        "Hand the conversation to a human agent; only when the request is outside this policy.",
        summary=("string", "a summary of the user's issue"),
    ),
]
