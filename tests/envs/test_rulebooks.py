"""One rulebook per domain: our generated `retail` and `airline` tools against tau2-bench's ports, call by call.

Every tool both implementations have (art_core/envs/{retail,airline}/tools.py, raising ToolError, and
art_core/envs/tau2/{retail,airline}.py, raising ValueError) runs the same calls on copies of the same generated
database. Two runs agree when each call is refused by both or by neither, every call returns the same value (as
the agent reads it, parsed back from JSON) and the databases end equal. `DIFFERENCES` lists the tools that
disagree on purpose; the test fails on a tool that disagrees without being listed, and on a listed tool that no
longer disagrees, so the list (and its copy in docs/domains.md) stays true.

Retail: the generated database has tau2's layout, so tau2's tools run on it as is. Airline: users and
reservations share tau2's layout, flights do not (`departure` vs `scheduled_departure_time_est`; seats and prices
as lists in CABINS order vs dicts by cabin), so tau2's side runs on the same database translated to tau2's
layout (`to_tau2_layout`, a renaming), both final databases are compared in that layout, search results are
compared as the flights offered, and tau2's fees are set to the generated domain's.

    pytest tests/envs/test_rulebooks.py    # a few seconds; no tau2 data needed (the layout test skips without it)
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from art_core.envs.airline import tools as ours_airline
from art_core.envs.airline.db import BAG_PRICE, CABINS, INSURANCE_PRICE, NOW
from art_core.envs.airline.db import make_db as make_airline_db
from art_core.envs.retail import tools as ours_retail
from art_core.envs.retail.db import make_db as make_retail_db
from art_core.envs.tau2 import airline as tau2_airline
from art_core.envs.tau2 import retail as tau2_retail
from art_core.envs.tau2.data import Tau2DataMissing, load_tau2_data
from art_core.envs.tool_use.tools import ToolError, fresh_copy, to_text

Db = dict[str, Any]
Call = tuple[str, dict[str, Any]]

# tool -> how ours differs from tau2's. The one list of deliberate differences (docs/domains.md repeats it).
DIFFERENCES: dict[str, str] = {
    "retail/find_user_id_by_email": "ours strips spaces around the email; tau2 matches it as typed",
    "retail/find_user_id_by_name_zip": "ours strips spaces around name and zip; tau2 matches them as typed",
    "retail/cancel_pending_order": "after a payment change, tau2 refunds every payment_history entry (the change's "
    "refund too); ours refunds each method what it still has paid",
    "retail/modify_pending_order_address": "tau2 also changes a 'pending (item modified)' order; ours only 'pending'",
    "retail/modify_pending_order_items": "tau2 gives every changed line the last new variant's price and options, "
    "books a $0 'refund' for an even swap, stores the amount unrounded and accepts empty item lists; ours does none",
    "retail/modify_pending_order_payment": "tau2 also changes a 'pending (item modified)' order; ours only 'pending'",
    "retail/return_delivered_order_items": "tau2 accepts an empty item list; ours refuses it",
    "retail/exchange_delivered_order_items": "tau2 sorts old and new ids separately (pairs get crossed), accepts an "
    "item for itself and an empty list; ours keeps pairs and refuses both",
    "retail/transfer_to_human_agents": "ours answers 'Transfer successful: a human agent will take over ...' and ends "
    "the episode; tau2 answers 'Transfer successful' and its customer ends it",
    "airline/get_reservation_details": "ours adds each flight's current status to the segments (it has no "
    "get_flight_status), and our writes return that view; tau2 returns the stored record",
    "airline/list_all_airports": "tau2 answers its fixed list of 20 airports ({iata, city}); ours reads the database's "
    "({code, city})",
    "airline/search_direct_flight": "ours refuses an unknown airport or a date without flights; tau2 answers []",
    "airline/search_onestop_flight": "ours needs 60 minutes to connect and refuses unknown airports; tau2 takes any "
    "connection (a next-day 2nd leg after a '+1' arrival) and answers []",
    "airline/book_reservation": "ours numbers ids Z00001.., sets status 'active', checks the route, nonfree <= total "
    "bags and one use per payment method; tau2 uses HATHAT.., status None and none of these checks",
    "airline/update_reservation_flights": "ours moves seats between the old and new flights, checks the route and "
    "refuses a cancelled reservation; tau2 does none of these",
    "airline/update_reservation_baggages": "ours refuses fewer bags, nonfree > total and a cancelled reservation; tau2 "
    "sets any counts (charging only added non-free bags)",
    "airline/update_reservation_passengers": "ours refuses a cancelled reservation; tau2 changes it",
    "airline/cancel_reservation": "ours credits gift cards back, releases seats, skips certificates and refuses a "
    "second cancel; tau2 only appends a negative entry per payment",
    "airline/send_certificate": "ours numbers ids certificate_9000001.. with an int amount and refuses $0; tau2 uses "
    "certificate_3221322.. (three at most) with a float amount and an 'id' field",
    "airline/transfer_to_human_agents": "ours refuses an empty summary; tau2 accepts it",
}

REFUSED = ("refused",)  # a call's outcome when it raised: no JSON value parses to a tuple


# ---- running calls through one implementation ----------------------------------------------------------------


def outcome(fn: Callable[..., Any], db: Db, kwargs: dict[str, Any], refusal: type[Exception]) -> Any:
    """REFUSED, or the returned value as the agent reads it (JSON parsed back, so key order and str-vs-dict drop)."""
    try:
        result = fn(db, **kwargs)
    except refusal:
        return REFUSED
    text = to_text(result)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON-like values first differ, e.g. "orders/#W1/status: 'pending' != 'cancelled'"."""
    if a == b:  # compared in C; the walk below only goes down branches that differ
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'ours' if key in a else 'tau2'}"
            found = first_difference(a[key], b[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{path}/{i}"))), None)
    return f"{path}: {a!r:.150} != {b!r:.150}"


class Rulebooks:
    """One domain's two tool sets and how to put their runs side by side."""

    def __init__(self, domain: str, db: Db, ours: dict, tau2: dict, layout=None, view=None):
        self.domain, self.db, self.ours, self.tau2 = domain, db, ours, tau2  # db: our generated database
        self.layout = layout or (lambda db: db)  # our database in tau2's layout
        self.view = view or (lambda name, value: value)  # a returned value, reduced to what both layouts share

    def run(self, calls: list[Call], db: Db) -> str | None:
        """None if both implementations agree on `calls` over `db`, else every way they differ."""
        ours_db, tau2_db = fresh_copy(db), self.layout(fresh_copy(db))
        found = []
        for i, (name, kwargs) in enumerate(calls):
            a = self.view(name, outcome(self.ours[name], ours_db, kwargs, ToolError))
            b = self.view(name, outcome(self.tau2[name], tau2_db, kwargs, Exception))  # tau2 refuses by any raise
            if (a == REFUSED) != (b == REFUSED):
                found.append(f"call {i} ({name}): {'ours' if a == REFUSED else 'tau2'} refuses, the other does not")
            elif a != b:
                found.append(f"call {i} ({name}) returns differ at {first_difference(a, b)}")
        if self.layout(ours_db) != tau2_db:
            found.append(f"databases differ at {first_difference(self.layout(ours_db), tau2_db)}")
        return "; ".join(found) or None

    def differences(self, probes: dict[str, Callable[[Db], list[list[Call]]]]) -> dict[str, list[str]]:
        """tool -> how each disagreeing probe of it disagrees (tools whose probes all agree are left out)."""
        out: dict[str, list[str]] = {}
        for tool, probe in probes.items():
            db = fresh_copy(self.db)
            for calls in probe(db):  # the probe may shape `db` first; every call list starts from that state
                found = self.run(calls, db)
                if found:
                    out.setdefault(f"{self.domain}/{tool}", []).append(f"{[n for n, _ in calls]}: {found}")
        return out


# ---- retail probes: each returns call lists that exercise one tool's rules, successes and refusals --------------

ADDRESS = dict(address1="1 Test Road", address2="", city="Austin", state="TX", country="USA", zip="78701")


def pick(db: Db, status: str, *, items: int = 1, where=lambda order, user: True) -> tuple[dict, dict]:
    for order in db["orders"].values():
        user = db["users"][order["user_id"]]
        if order["status"] == status and len(order["items"]) >= items and where(order, user):
            return order, user
    raise LookupError(f"no {status} order with {items}+ items fits the probe")


def gift_card(user: dict) -> dict | None:
    return next((m for m in user["payment_methods"].values() if m["source"] == "gift_card"), None)


def paid_with(order: dict) -> str:
    return order["payment_history"][0]["payment_method_id"]


def variant(db: Db, line: dict, dearer: bool | None = None, available: bool = True) -> str:
    """Another variant of the line's product (dearer: priced above the line, or below when False)."""
    for v in db["products"][line["product_id"]]["variants"].values():
        if v["item_id"] != line["item_id"] and v["available"] == available:
            if dearer is None or (v["price"] > line["price"]) == dearer:
                return v["item_id"]
    raise LookupError(f"no fitting variant of {line['name']}")


def retail_probes() -> dict[str, Callable[[Db], list[list[Call]]]]:
    def user_lookups(db):
        user = next(iter(db["users"].values()))
        first, last, zip_ = user["name"]["first_name"], user["name"]["last_name"], user["address"]["zip"]
        by_email = [user["email"], user["email"].upper(), f" {user['email']} ", "nobody@example.com"]
        by_name = [
            (first, last, zip_),
            (first.upper(), last.lower(), zip_),
            (f" {first}", last, zip_),
            (first, last, "0"),
        ]
        return {
            "find_user_id_by_email": [[("find_user_id_by_email", {"email": e})] for e in by_email],
            "find_user_id_by_name_zip": [
                [("find_user_id_by_name_zip", {"first_name": f, "last_name": la, "zip": z})] for f, la, z in by_name
            ],
        }

    def reads(tool, key, good):
        return lambda db: [[(tool, {key: good(db)})], [(tool, {key: "0000000"})]]

    def cancel(db):
        pending, _ = pick(db, "pending")
        delivered, _ = pick(db, "delivered")
        switched, user = pick(db, "pending", where=lambda o, u: gift_card(u) and paid_with(o) != gift_card(u)["id"])
        gift_card(user)["balance"] = 5000.0
        oid = switched["order_id"]
        return [
            [("cancel_pending_order", {"order_id": pending["order_id"], "reason": "no longer needed"})],
            [("cancel_pending_order", {"order_id": pending["order_id"], "reason": "found it cheaper"})],
            [("cancel_pending_order", {"order_id": delivered["order_id"], "reason": "ordered by mistake"})],
            [
                ("modify_pending_order_payment", {"order_id": oid, "payment_method_id": gift_card(user)["id"]}),
                ("cancel_pending_order", {"order_id": oid, "reason": "ordered by mistake"}),
            ],
        ]

    def swap(order, old, new, pm=None):
        args = {"order_id": order["order_id"], "item_ids": old, "new_item_ids": new}
        return ("modify_pending_order_items", {**args, "payment_method_id": pm or paid_with(order)})

    def modify_address(db):
        pending, _ = pick(db, "pending")
        delivered, _ = pick(db, "delivered")
        modified, _ = pick(db, "pending", where=lambda o, u: o is not pending)
        modified["status"] = "pending (item modified)"  # set here, not by a modify call, which differs on its own

        def change(order):
            return [("modify_pending_order_address", {"order_id": order["order_id"], **ADDRESS})]

        return [change(pending), change(delivered), change(modified)]

    def modify_items(db):
        two, _ = pick(db, "pending", items=2)
        a, b = two["items"][:2]
        even, _ = pick(db, "pending", where=lambda o, u: o is not two)
        line = even["items"][0]
        db["products"][line["product_id"]]["variants"][variant(db, line)]["price"] = line["price"]  # an even swap
        poor, user = pick(db, "pending", where=lambda o, u: o is not two and o is not even and gift_card(u))
        gift_card(user)["balance"] = 0.0
        p = poor["items"][0]
        first = swap(two, [a["item_id"]], [variant(db, a)])
        return [
            [first],
            [swap(two, [a["item_id"], b["item_id"]], [variant(db, a), variant(db, b)])],
            [swap(even, [line["item_id"]], [variant(db, line)])],
            [swap(two, [], [])],
            [swap(two, [a["item_id"]], [variant(db, a, available=False)])],
            [swap(two, [a["item_id"]], [a["item_id"]])],
            [swap(two, [a["item_id"], a["item_id"]], [variant(db, a), variant(db, a)])],
            [swap(poor, [p["item_id"]], [variant(db, p, dearer=True)], gift_card(user)["id"])],
            [first, swap(two, [b["item_id"]], [variant(db, b)])],
        ]

    def modify_payment(db):
        order, user = pick(db, "pending", where=lambda o, u: gift_card(u) and paid_with(o) != gift_card(u)["id"])
        gift_card(user)["balance"] = 5000.0
        poor, poor_user = pick(
            db, "pending", where=lambda o, u: u is not user and gift_card(u) and paid_with(o) != gift_card(u)["id"]
        )
        gift_card(poor_user)["balance"] = 0.0
        marked, _ = pick(
            db, "pending", where=lambda o, u: o is not order and o is not poor and len(u["payment_methods"]) > 1
        )
        marked["status"] = "pending (item modified)"  # as tau2's own data could hold it: one payment, items changed
        other = next(m for m in db["users"][marked["user_id"]]["payment_methods"] if m != paid_with(marked))
        processed, _ = pick(db, "processed", where=lambda o, u: len(u["payment_methods"]) > 1)
        processed_other = next(
            m for m in db["users"][processed["user_id"]]["payment_methods"] if m != paid_with(processed)
        )

        def change(o, pm):
            return [("modify_pending_order_payment", {"order_id": o["order_id"], "payment_method_id": pm})]

        return [
            change(order, gift_card(user)["id"]),
            change(order, paid_with(order)),
            change(poor, gift_card(poor_user)["id"]),
            change(marked, other),
            change(processed, processed_other),
            change(order, gift_card(user)["id"]) + change(order, paid_with(order)),
        ]

    def returns(db):
        order, user = pick(db, "delivered", items=2, where=lambda o, u: len(u["payment_methods"]) > 1)
        other = next(m for m in user["payment_methods"].values() if m["id"] != paid_with(order))
        pending, _ = pick(db, "pending")
        ids = [line["item_id"] for line in order["items"]]

        def ret(o, items, pm):
            return [
                (
                    "return_delivered_order_items",
                    {"order_id": o["order_id"], "item_ids": items, "payment_method_id": pm},
                )
            ]

        return [
            ret(order, ids[:1], paid_with(order)),
            ret(order, ids, other["id"]),  # a gift card is accepted, another card or paypal is not
            ret(order, [], paid_with(order)),
            ret(order, ["0000000"], paid_with(order)),
            ret(order, ids[:1] * 2, paid_with(order)),
            ret(pending, [pending["items"][0]["item_id"]], paid_with(pending)),
        ]

    def exchanges(db):
        def crossed(o, u):  # two lines whose new ids sort the other way round than the old ones
            if len(o["items"]) < 2:
                return False
            a, b = sorted(o["items"][:2], key=lambda line: line["item_id"])
            try:
                return variant(db, a) > variant(db, b)
            except LookupError:
                return False

        order, _ = pick(db, "delivered", items=2, where=crossed)
        a, b = sorted(order["items"][:2], key=lambda line: line["item_id"])
        poor, user = pick(db, "delivered", where=lambda o, u: o is not order and gift_card(u))
        gift_card(user)["balance"] = 0.0
        pending, _ = pick(db, "pending")

        def exchange(o, old, new, pm=None):
            args = {"order_id": o["order_id"], "item_ids": [x["item_id"] for x in old], "new_item_ids": new}
            return [("exchange_delivered_order_items", {**args, "payment_method_id": pm or paid_with(o)})]

        p = poor["items"][0]
        return [
            exchange(order, [a], [variant(db, a)]),
            exchange(order, [a, b], [variant(db, a), variant(db, b)]),
            exchange(order, [a], [a["item_id"]]),
            exchange(order, [], []),
            exchange(order, [a], [variant(db, a, available=False)]),
            exchange(poor, [p], [variant(db, p, dearer=True)], gift_card(user)["id"]),
            exchange(pending, pending["items"][:1], [variant(db, pending["items"][0])]),
        ]

    def first_user(db):
        return next(iter(db["users"]))

    return {
        **{
            tool: (lambda db, tool=tool: user_lookups(db)[tool])
            for tool in ("find_user_id_by_email", "find_user_id_by_name_zip")
        },
        "get_user_details": reads("get_user_details", "user_id", first_user),
        "get_order_details": reads("get_order_details", "order_id", lambda db: next(iter(db["orders"]))),
        "get_product_details": reads("get_product_details", "product_id", lambda db: next(iter(db["products"]))),
        "list_all_product_types": lambda db: [[("list_all_product_types", {})]],
        "cancel_pending_order": cancel,
        "modify_pending_order_address": modify_address,
        "modify_pending_order_items": modify_items,
        "modify_pending_order_payment": modify_payment,
        "modify_user_address": lambda db: [
            [("modify_user_address", {"user_id": first_user(db), **ADDRESS})],
            [("modify_user_address", {"user_id": "nobody_0000", **ADDRESS})],
        ],
        "return_delivered_order_items": returns,
        "exchange_delivered_order_items": exchanges,
        "transfer_to_human_agents": lambda db: [[("transfer_to_human_agents", {"summary": "wants a refund"})]],
    }


# ---- airline: tau2's layout, and probes ----------------------------------------------------------------------


def to_tau2_layout(db: Db) -> Db:
    """Our airline database with tau2's flights table (times renamed; seats and prices keyed by cabin)."""
    flights = {}
    for number, f in db["flights"].items():
        dates = {}
        for day, entry in f["dates"].items():
            dates[day] = {"status": entry["status"]}
            if "seats" in entry:
                dates[day] |= {
                    "available_seats": dict(zip(CABINS, entry["seats"])),
                    "prices": dict(zip(CABINS, entry["prices"])),
                }
        flights[number] = {
            "flight_number": number,
            "origin": f["origin"],
            "destination": f["destination"],
            "scheduled_departure_time_est": f["departure"],
            "scheduled_arrival_time_est": f["arrival"],
            "dates": dates,
        }
    return {**db, "flights": flights}


def airline_view(name: str, value: Any) -> Any:
    """A returned value with what only the layout or get_reservation_details makes differ taken out.

    Search results become the flights offered (each layout names times and dates its own way). Our write tools
    return the reservation as our get_reservation_details shows it, with each flight's status: that difference
    is listed once, under get_reservation_details, so the writes are compared on their own rules.
    """
    if value == REFUSED:
        return value
    if name in ("search_direct_flight", "search_onestop_flight"):
        keep = ("flight_number", "origin", "destination", "available_seats", "prices")

        def flight(offer: dict) -> dict:
            return {k: offer[k] for k in keep}

        return [[flight(o) for o in x] if isinstance(x, list) else flight(x) for x in value]
    if name != "get_reservation_details" and isinstance(value, dict) and "reservation_id" in value:
        return {**value, "flights": [{k: v for k, v in s.items() if k != "status"} for s in value["flights"]]}
    return value


def bookable(db: Db, cabin: str = "economy", seats: int = 1):
    """(flight, date) pairs open for booking with `seats` left in `cabin`, in database order."""
    i = CABINS.index(cabin)
    for f in db["flights"].values():
        for day, entry in f["dates"].items():
            if entry["status"] == "available" and entry["seats"][i] >= seats:
                yield f, day


def flying_later(db: Db, res: dict, cabin: str) -> bool:
    """Every flight of `res` still bookable, with seats for all its passengers in `cabin`."""
    entries = [db["flights"][s["flight_number"]]["dates"][s["date"]] for s in res["flights"]]
    return all(
        e["status"] == "available" and e["seats"][CABINS.index(cabin)] >= len(res["passengers"]) for e in entries
    )


def card(user: dict) -> str:
    return next(m for m, v in user["payment_methods"].items() if v["source"] == "credit_card")


def airline_probes() -> dict[str, Callable[[Db], list[list[Call]]]]:
    def a_reservation(db, where=lambda r, u: True):
        for r in db["reservations"].values():
            if where(r, db["users"][r["user_id"]]):
                return r, db["users"][r["user_id"]]
        raise LookupError("no reservation fits the probe")

    def searches(db):
        f, day = next(bookable(db))
        go = ("search_direct_flight", {"origin": f["origin"], "destination": f["destination"], "date": day})
        return [
            [go],
            [("search_direct_flight", {"origin": "XXX", "destination": f["destination"], "date": day})],
            [("search_direct_flight", {"origin": f["origin"], "destination": f["destination"], "date": "2025-08-01"})],
        ]

    def onestop(db):
        # a connection of under 60 minutes: tau2 offers it, ours does not
        def tight():
            for a, day in bookable(db):
                for b in db["flights"].values():
                    if b["origin"] == a["destination"] and b["destination"] != a["origin"]:
                        if b["dates"][day]["status"] == "available" and a["arrival"] <= b["departure"] < _plus_hour(
                            a["arrival"]
                        ):
                            return a["origin"], b["destination"], day
            raise LookupError("no tight connection in this database")

        origin, destination, day = tight()
        return [
            [("search_onestop_flight", {"origin": origin, "destination": destination, "date": day})],
            [("search_onestop_flight", {"origin": origin, "destination": "XXX", "date": day})],
        ]

    def book(db):
        f, day = next(bookable(db))
        user = next(iter(db["users"].values()))
        price = f["dates"][day]["prices"][CABINS.index("economy")]
        me = {**user["name"], "dob": user["dob"]}

        def booking(origin=f["origin"], destination=f["destination"], pay=None, total=0, nonfree=0):
            return [
                (
                    "book_reservation",
                    dict(
                        user_id=user["user_id"],
                        origin=origin,
                        destination=destination,
                        flight_type="one_way",
                        cabin="economy",
                        flights=[{"flight_number": f["flight_number"], "date": day}],
                        passengers=[me],
                        payment_methods=pay or [{"payment_id": card(user), "amount": price + BAG_PRICE * nonfree}],
                        total_baggages=total,
                        nonfree_baggages=nonfree,
                        insurance="no",
                    ),
                )
            ]

        return [
            booking(),
            booking(pay=[{"payment_id": card(user), "amount": price - 1}]),
            booking(origin=f["destination"], destination=f["origin"]),
            booking(pay=[{"payment_id": card(user), "amount": price - 1}, {"payment_id": card(user), "amount": 1}]),
            booking(total=0, nonfree=1),
        ]

    def update_flights(db):
        res, user = a_reservation(db, lambda r, u: flying_later(db, r, "business") and r["cabin"] != "business")
        cert = next((m for m, v in user["payment_methods"].items() if v["source"] == "certificate"), "certificate_0")
        legs = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
        other, day = next((f, d) for f, d in bookable(db, seats=len(res["passengers"])) if f["origin"] != res["origin"])

        def update(cabin, flights, pay):
            return [
                (
                    "update_reservation_flights",
                    {"reservation_id": res["reservation_id"], "cabin": cabin, "flights": flights, "payment_id": pay},
                )
            ]

        return [
            update("business", legs, card(user)),
            update(res["cabin"], legs, card(user)),
            update("business", legs, cert),
            update(res["cabin"], [{"flight_number": other["flight_number"], "date": day}], card(user)),
            [("cancel_reservation", {"reservation_id": res["reservation_id"]})]
            + update(res["cabin"], legs, card(user)),
        ]

    def bags(db):
        res, user = a_reservation(db, lambda r, u: r["total_baggages"] > r["nonfree_baggages"] > 0)

        def set_bags(total, nonfree):
            args = {"reservation_id": res["reservation_id"], "total_baggages": total, "nonfree_baggages": nonfree}
            return [("update_reservation_baggages", {**args, "payment_id": card(user)})]

        total, nonfree = res["total_baggages"], res["nonfree_baggages"]
        return [
            set_bags(total + 1, nonfree + 1),
            set_bags(total + 1, nonfree),
            set_bags(total - 1, nonfree - 1),
            set_bags(1, 2),
        ]

    def passengers(db):
        res, _ = a_reservation(db)
        renamed = [{**p, "first_name": "Alex"} for p in res["passengers"]]
        rename = [("update_reservation_passengers", {"reservation_id": res["reservation_id"], "passengers": renamed})]
        return [
            rename,
            [("update_reservation_passengers", {"reservation_id": res["reservation_id"], "passengers": renamed * 2})],
            [("cancel_reservation", {"reservation_id": res["reservation_id"]})] + rename,
        ]

    def cancel(db):
        res, _ = a_reservation(db, lambda r, u: flying_later(db, r, r["cabin"]))
        gifted, user = a_reservation(
            db, lambda r, u: r is not res and any(v["source"] == "gift_card" for v in u["payment_methods"].values())
        )
        gifted["payment_history"][0]["payment_id"] = next(
            m for m, v in user["payment_methods"].items() if v["source"] == "gift_card"
        )
        once = [("cancel_reservation", {"reservation_id": res["reservation_id"]})]
        return [
            once,
            once * 2,
            [("cancel_reservation", {"reservation_id": gifted["reservation_id"]})],
            [("cancel_reservation", {"reservation_id": "XXXXXX"})],
        ]

    def user_id(db):
        return next(iter(db["users"]))

    return {
        "get_user_details": lambda db: [
            [("get_user_details", {"user_id": user_id(db)})],
            [("get_user_details", {"user_id": "nobody"})],
        ],
        "get_reservation_details": lambda db: [
            [("get_reservation_details", {"reservation_id": next(iter(db["reservations"]))})],
            [("get_reservation_details", {"reservation_id": "XXXXXX"})],
        ],
        "list_all_airports": lambda db: [[("list_all_airports", {})]],
        "search_direct_flight": searches,
        "search_onestop_flight": onestop,
        "book_reservation": book,
        "update_reservation_flights": update_flights,
        "update_reservation_baggages": bags,
        "update_reservation_passengers": passengers,
        "cancel_reservation": cancel,
        "send_certificate": lambda db: [
            [("send_certificate", {"user_id": user_id(db), "amount": 100})],
            [("send_certificate", {"user_id": user_id(db), "amount": 0})],
        ],
        "calculate": lambda db: [
            [("calculate", {"expression": "(120 + 150) * 2 + 25 * 2 + 40 * 1"})],
            [("calculate", {"expression": "7 / 3"})],
            [("calculate", {"expression": "1 / 0"})],
            [("calculate", {"expression": "__import__('os')"})],
        ],
        "transfer_to_human_agents": lambda db: [
            [("transfer_to_human_agents", {"summary": "wants a refund"})],
            [("transfer_to_human_agents", {"summary": ""})],
        ],
    }


def _plus_hour(hms: str) -> str:
    h, rest = hms.split(":", 1)
    return f"{int(h) + 1:02d}:{rest}"


# ---- the tests -------------------------------------------------------------------------------------------------

RETAIL = Rulebooks("retail", make_retail_db(0, n_users=40), ours_retail.TOOLS, tau2_retail.TOOLS)
AIRLINE = Rulebooks(
    "airline",
    make_airline_db(0, n_users=20),
    ours_airline.TOOLS,
    tau2_airline.make_tools(tau2_airline.AirlineRules(bag_fee=BAG_PRICE, insurance_fee=INSURANCE_PRICE, now=NOW)),
    layout=to_tau2_layout,
    view=airline_view,
)


@pytest.mark.parametrize(
    "books, probes", [(RETAIL, retail_probes()), (AIRLINE, airline_probes())], ids=["retail", "airline"]
)
def test_exactly_the_listed_tools_differ_from_tau2(books, probes):
    shared = set(books.ours) & set(books.tau2)
    assert set(probes) == shared, "every tool both implementations have is probed"
    found = books.differences(probes)
    listed = {t for t in DIFFERENCES if t.startswith(books.domain + "/")}
    unlisted = {t: found[t] for t in sorted(set(found) - listed)}
    assert not unlisted, f"these tools now differ from tau2's; unify them or list them in DIFFERENCES: {unlisted}"
    assert not listed - set(found), (
        f"these listed tools no longer differ; drop them from DIFFERENCES: {listed - set(found)}"
    )


def test_the_generated_databases_have_tau2s_layout_except_airline_flights():
    """Why tau2's tools can run on our data: the tables match tau2's db.json, key for key, but for what is listed."""
    try:
        retail, airline = load_tau2_data("retail").db, load_tau2_data("airline").db
    except Tau2DataMissing:
        pytest.skip("tau2's data (the [tau2] extra) is not installed")

    def keys(table: dict) -> set[str]:
        return set().union(*map(set, table.values()))

    def methods(db: Db) -> set[tuple]:
        return {(m["source"], *sorted(m)) for u in db["users"].values() for m in u["payment_methods"].values()}

    ours = RETAIL.db
    assert keys(ours["users"]) == keys(retail["users"]) and keys(ours["products"]) == keys(retail["products"])
    assert methods(ours) == methods(retail)
    # our orders also start in the states tau2's own tools leave behind (its db.json has none of those)
    assert keys(ours["orders"]) - keys(retail["orders"]) == {
        "cancel_reason",
        *("return_items", "return_payment_method_id"),
        *("exchange_items", "exchange_new_items", "exchange_payment_method_id", "exchange_price_difference"),
    }

    ours = AIRLINE.db
    assert keys(airline["users"]) - keys(ours["users"]) == {"address"} and keys(ours["users"]) <= keys(airline["users"])
    assert {m[:1] + tuple(k for k in m[1:] if k != "id") for m in methods(airline)} == methods(ours)  # no "id" in ours
    assert keys(ours["reservations"]) - keys(airline["reservations"]) == {"status"}  # tau2's reservations have none
    flights = to_tau2_layout(ours)["flights"]
    assert keys(flights) == keys(airline["flights"])
    open_days = [d for f in flights.values() for d in f["dates"].values() if d["status"] == "available"]
    tau2_open = next(d for f in airline["flights"].values() for d in f["dates"].values() if d["status"] == "available")
    assert {tuple(sorted(d)) for d in open_days} == {tuple(sorted(tau2_open))}
    assert set(tau2_open["prices"]) == set(tau2_open["available_seats"]) == set(CABINS)
