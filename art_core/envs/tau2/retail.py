"""tau2-bench's retail tools on tau2's own retail database, and `load_environment` for `tau2-retail`.

The 16 tools have tau2's names, arguments and behaviour, including what tau2 allows and we do not in our
own `retail` (an item listed twice, a pending-with-modified-items order whose address or payment changes)
and tau2's known quirks, because the reward compares the agent's database with the gold replay's under
these same tools:
- `modify_pending_order_items` gives every modified line the price and options of the last new variant;
- `exchange_delivered_order_items` sorts old and new item ids separately;
- a $0 item modification still books a $0 "refund".

    >>> env = load_environment(judge={"model": "openai/gpt-4.1-2025-04-14"})   # see env.Tau2Options
    >>> [s.id for s in env.scenarios("test")][:3]
    ['5', '9', '12']
"""

from __future__ import annotations

import json
from typing import Any

from art_core.envs.tau2.env import TRAIN_ONLY_OPTIONS  # noqa: F401  (evaluation_options reads it here)
from art_core.envs.tau2.toolkit import (
    CALCULATE_SCHEMA,
    TRANSFER_SCHEMA,
    calculate,
    string,
    strings,
    transfer_to_human_agents,
)
from art_core.envs.tool_use.tools import ToolFn, function_schema

Db = dict[str, Any]
CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _order(db: Db, order_id: str) -> dict[str, Any]:
    if order_id not in db["orders"]:
        raise ValueError("Order not found")
    return db["orders"][order_id]


def _user(db: Db, user_id: str) -> dict[str, Any]:
    if user_id not in db["users"]:
        raise ValueError("User not found")
    return db["users"][user_id]


def _product(db: Db, product_id: str) -> dict[str, Any]:
    if product_id not in db["products"]:
        raise ValueError("Product not found")
    return db["products"][product_id]


def _variant(db: Db, product_id: str, item_id: str) -> dict[str, Any]:
    product = _product(db, product_id)
    if item_id not in product["variants"]:
        raise ValueError("Variant not found")
    return product["variants"][item_id]


def _payment_method(db: Db, user_id: str, payment_method_id: str) -> dict[str, Any]:
    methods = _user(db, user_id)["payment_methods"]
    if payment_method_id not in methods:
        raise ValueError("Payment method not found")
    return methods[payment_method_id]


def _is_gift_card(method: dict[str, Any]) -> bool:
    return method.get("source") == "gift_card"


def _check_counts(order: dict[str, Any], item_ids: list[str], message: str) -> None:
    # an id may be listed as many times as the order holds it (two identical kettles)
    held = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            raise ValueError(message.format(item_id=item_id))


def _price_difference(
    db: Db, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str], same_id_allowed: bool
) -> tuple[float, dict]:
    if len(item_ids) != len(new_item_ids):
        raise ValueError("The number of items to be exchanged should match")
    diff, variant = 0.0, {}
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        if not same_id_allowed and item_id == new_item_id:
            raise ValueError("The new item id should be different from the old item id")
        item = next((i for i in order["items"] if i["item_id"] == item_id), None)
        if item is None:
            raise ValueError(f"Item {item_id} not found")
        variant = _variant(db, item["product_id"], new_item_id)
        if not variant["available"]:
            raise ValueError(f"New item {new_item_id} not found or available")
        diff += variant["price"] - item["price"]
    return diff, variant


# ---- reads ------------------------------------------------------------------------------------


def find_user_id_by_email(db: Db, email: str) -> str:
    for user_id, user in db["users"].items():
        if user["email"].lower() == email.lower():
            return user_id
    raise ValueError("User not found")


def find_user_id_by_name_zip(db: Db, first_name: str, last_name: str, zip: str) -> str:
    for user_id, user in db["users"].items():
        name = user["name"]
        if (
            name["first_name"].lower() == first_name.lower()
            and name["last_name"].lower() == last_name.lower()
            and user["address"]["zip"] == zip
        ):
            return user_id
    raise ValueError("User not found")


def get_order_details(db: Db, order_id: str) -> dict[str, Any]:
    return _order(db, order_id)


def get_product_details(db: Db, product_id: str) -> dict[str, Any]:
    return _product(db, product_id)


def get_item_details(db: Db, item_id: str) -> dict[str, Any]:
    for product in db["products"].values():
        if item_id in product["variants"]:
            return product["variants"][item_id]
    raise ValueError("Item not found")


def get_user_details(db: Db, user_id: str) -> dict[str, Any]:
    return _user(db, user_id)


def list_all_product_types(db: Db) -> str:
    return json.dumps({p["name"]: p["product_id"] for p in db["products"].values()}, sort_keys=True)


# ---- writes -----------------------------------------------------------------------------------


def cancel_pending_order(db: Db, order_id: str, reason: str) -> dict[str, Any]:
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ValueError("Non-pending order cannot be cancelled")
    if reason not in CANCEL_REASONS:
        raise ValueError("Invalid reason")
    refunds = []
    for payment in order["payment_history"]:  # every entry is refunded, gift cards at once
        refunds.append(
            {
                "transaction_type": "refund",
                "amount": payment["amount"],
                "payment_method_id": payment["payment_method_id"],
            }
        )
        method = _payment_method(db, order["user_id"], payment["payment_method_id"])
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return order


def exchange_delivered_order_items(
    db: Db, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ValueError("Non-delivered order cannot be exchanged")
    _check_counts(order, item_ids, "Number of {item_id} not found.")
    diff, _ = _price_difference(db, order, item_ids, new_item_ids, same_id_allowed=True)
    diff = round(diff, 2)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff:
        raise ValueError("Insufficient gift card balance to pay for the price difference")
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return order


def _set_address(
    target: dict[str, Any], address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> None:
    target["address"] = {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


def modify_pending_order_address(
    db: Db, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    if "pending" not in order["status"]:  # tau2's loose check: "pending (item modified)" passes too
        raise ValueError("Non-pending order cannot be modified")
    _set_address(order, address1, address2, city, state, country, zip)
    return order


def modify_pending_order_items(
    db: Db, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ValueError("Non-pending order cannot be modified")
    _check_counts(order, item_ids, "{item_id} not found")
    diff, last_variant = _price_difference(db, order, item_ids, new_item_ids, same_id_allowed=False)
    method = _payment_method(db, order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff:
        raise ValueError("Insufficient gift card balance to pay for the new item")
    order["payment_history"].append(
        {
            "transaction_type": "payment" if diff > 0 else "refund",
            "amount": abs(diff),
            "payment_method_id": payment_method_id,
        }
    )
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - diff, 2)
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        item["item_id"] = new_item_id
        item["price"] = last_variant["price"]  # tau2's behaviour: the last new variant's price and options
        item["options"] = last_variant["options"]
    order["status"] = "pending (item modified)"
    return order


def modify_pending_order_payment(db: Db, order_id: str, payment_method_id: str) -> dict[str, Any]:
    order = _order(db, order_id)
    if "pending" not in order["status"]:
        raise ValueError("Non-pending order cannot be modified")
    method = _payment_method(db, order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ValueError("There should be exactly one payment for a pending order")
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        raise ValueError("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if _is_gift_card(method) and method["balance"] < amount:
        raise ValueError("Insufficient gift card balance to pay for the order")
    history.extend(
        [
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
        ]
    )
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - amount, 2)
    old = _payment_method(db, order["user_id"], old_id)
    if _is_gift_card(old):
        old["balance"] = round(old["balance"] + amount, 2)
    return order


def modify_user_address(
    db: Db, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    user = _user(db, user_id)
    _set_address(user, address1, address2, city, state, country, zip)
    return user


def return_delivered_order_items(db: Db, order_id: str, item_ids: list[str], payment_method_id: str) -> dict[str, Any]:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ValueError("Non-delivered order cannot be returned")
    method = _payment_method(db, order["user_id"], payment_method_id)
    if not _is_gift_card(method) and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        raise ValueError("Payment method should be the original payment method")
    _check_counts(order, item_ids, "Some item not found")
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return order


TOOLS: dict[str, ToolFn] = {
    f.__name__: f
    for f in (
        calculate,
        cancel_pending_order,
        exchange_delivered_order_items,
        find_user_id_by_name_zip,
        find_user_id_by_email,
        get_order_details,
        get_product_details,
        get_item_details,
        get_user_details,
        list_all_product_types,
        modify_pending_order_address,
        modify_pending_order_items,
        modify_pending_order_payment,
        modify_user_address,
        return_delivered_order_items,
        transfer_to_human_agents,
    )
}
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
    }
)

_ORDER_ID = string("The order id, such as '#W0000000'; note the leading '#'.")
_USER_ID = string("The user id, such as 'sara_doe_496'.")
_PAYMENT = string(
    "A payment method id from the user's or the order's details, such as 'gift_card_0000000' or 'credit_card_0000000'."
)
_ADDRESS = {
    "address1": string("First address line, such as '123 Main St'."),
    "address2": string("Second address line, such as 'Apt 1', or ''."),
    "city": string("City, such as 'San Francisco'."),
    "state": string("State, such as 'CA'."),
    "country": string("Country, such as 'USA'."),
    "zip": string("Zip code, such as '12345'."),
}
_CONFIRM = " Explain the details and get the user's explicit confirmation (yes) before calling it."

SCHEMAS: list[dict[str, Any]] = [
    CALCULATE_SCHEMA,
    function_schema(
        "cancel_pending_order",
        "Cancel a pending order (processed or delivered orders cannot be cancelled). Its payments "
        "are refunded: to a gift card at once, to other methods in 5-7 business days. Returns the order." + _CONFIRM,
        {
            "order_id": _ORDER_ID,
            "reason": string("Why: 'no longer needed' or 'ordered by mistake'.", enum=list(CANCEL_REASONS)),
        },
    ),
    function_schema(
        "exchange_delivered_order_items",
        "Exchange items of a delivered order for other items of the same products. "
        "A delivered order can be returned or exchanged only once. Returns the order." + _CONFIRM,
        {
            "order_id": _ORDER_ID,
            "item_ids": strings("Item ids to exchange, such as '1008292230'; an id may repeat."),
            "new_item_ids": strings("The new item ids, position by position, each of the same product as the old one."),
            "payment_method_id": _PAYMENT,
        },
    ),
    function_schema(
        "find_user_id_by_name_zip",
        "Find a user id by first name, last name and zip code. Look up by email first; use "
        "this only when the user is not found by email or does not remember it.",
        {
            "first_name": string("First name, such as 'John'."),
            "last_name": string("Last name, such as 'Doe'."),
            "zip": string("Zip code, such as '12345'."),
        },
    ),
    function_schema(
        "find_user_id_by_email",
        "Find a user id by email.",
        {"email": string("The email, such as 'something@example.com'.")},
    ),
    function_schema("get_order_details", "Get the status and details of an order.", {"order_id": _ORDER_ID}),
    function_schema(
        "get_product_details",
        "Get the inventory details of a product (all its items).",
        {"product_id": string("The product id, such as '6086499569' (not an item id).")},
    ),
    function_schema(
        "get_item_details",
        "Get the inventory details of one item.",
        {"item_id": string("The item id, such as '6086499569' (not a product id).")},
    ),
    function_schema("get_user_details", "Get a user's details, including their orders.", {"user_id": _USER_ID}),
    function_schema(
        "list_all_product_types", "List the name and product id of every product type (the store has 50).", {}
    ),
    function_schema(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. Returns the order." + _CONFIRM,
        {"order_id": _ORDER_ID, **_ADDRESS},
    ),
    function_schema(
        "modify_pending_order_items",
        "Change items of a pending order to other items of the same products. Can be called "
        "only once per pending order. Returns the order." + _CONFIRM,
        {
            "order_id": _ORDER_ID,
            "item_ids": strings("Item ids to change, such as '1008292230'; an id may repeat."),
            "new_item_ids": strings("The new item ids, position by position, each of the same product as the old one."),
            "payment_method_id": _PAYMENT,
        },
    ),
    function_schema(
        "modify_pending_order_payment",
        "Change the payment method of a pending order. Returns the order." + _CONFIRM,
        {"order_id": _ORDER_ID, "payment_method_id": _PAYMENT},
    ),
    function_schema(
        "modify_user_address",
        "Change a user's default address. Returns the user." + _CONFIRM,
        {"user_id": _USER_ID, **_ADDRESS},
    ),
    function_schema(
        "return_delivered_order_items",
        "Request a return of items of a delivered order; the status becomes 'return "
        "requested' and the user gets an email on how to send them. Returns the order." + _CONFIRM,
        {
            "order_id": _ORDER_ID,
            "item_ids": strings("Item ids to return, such as '1008292230'; an id may repeat."),
            "payment_method_id": string("Where the refund goes: the original payment method or a gift card."),
        },
    ),
    TRANSFER_SCHEMA,
]


def load_environment(**options: Any):
    """The `tau2-retail` environment; options are `Tau2Options` fields (data_dir, user, judge, ...)."""
    from art_core.envs.tau2.env import Tau2Env, Tau2Tools

    return Tau2Env(
        Tau2Tools(name="tau2-retail", domain="retail", tools=TOOLS, schemas=SCHEMAS, write_tools=WRITE_TOOLS), **options
    )
