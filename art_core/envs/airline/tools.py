"""The airline tools: functions `fn(db, **kwargs)` with deterministic effects, and their OpenAI schemas.

Tools check the data (ids exist, seats are left, payments add up, balances suffice) and raise
`ToolError` with a message the agent can act on; they do not check the policy (who may cancel, what
basic economy allows): that is the agent's job, as in tau-bench. A write validates everything before
it changes anything, so a refused call leaves the database as it was.

    >>> from art_core.envs.airline.db import make_db
    >>> db = make_db(0)
    >>> [a["code"] for a in list_all_airports(db)][:3]
    ['ATL', 'BOS', 'DEN']
"""

from __future__ import annotations

import copy
from typing import Any

from art_core.envs.airline.db import BAG_PRICE, CABINS, INSURANCE_PRICE, Database, minutes_of
from art_core.envs.tool_use.tools import ToolError, function_schema

MIN_CONNECTION_MINUTES = 60


# ---- lookups and argument checks -------------------------------------------------------------


def _user(db: Database, user_id: Any) -> dict[str, Any]:
    user = db["users"].get(user_id) if isinstance(user_id, str) else None
    if user is None:
        raise ToolError(f"user {user_id!r} not found; ask the customer for their user id")
    return user


def _reservation(db: Database, reservation_id: Any, active: bool = True) -> dict[str, Any]:
    res = db["reservations"].get(reservation_id) if isinstance(reservation_id, str) else None
    if res is None:
        raise ToolError(f"reservation {reservation_id!r} not found")
    if active and res["status"] == "cancelled":
        raise ToolError(f"reservation {reservation_id} is already cancelled")
    return res


def _airport(db: Database, code: Any) -> str:
    if code not in db["airports"]:
        raise ToolError(f"unknown airport {code!r}; list_all_airports gives the valid codes")
    return code


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ToolError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolError(f"{what} must be a whole number >= 0, got {value!r}")
    return value


def _records(value: Any, fields: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    """A list of objects that each have `fields` (extra keys are dropped)."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise ToolError(f"{what} must be a non-empty list of objects with keys {', '.join(fields)}")
    out = []
    for v in value:
        missing = [f for f in fields if f not in v]
        if missing:
            raise ToolError(f"each item of {what} needs {', '.join(fields)}; missing {', '.join(missing)} in {v}")
        out.append({f: v[f] for f in fields})
    return out


def _bookable(db: Database, flight_number: Any, date: Any, cabin: str, seats: int) -> tuple[dict[str, Any], int]:
    """(flight, current price in `cabin`) for a flight that can be booked on `date` for `seats` people."""
    flight = db["flights"].get(flight_number) if isinstance(flight_number, str) else None
    if flight is None:
        raise ToolError(f"flight {flight_number!r} not found")
    entry = flight["dates"].get(date) if isinstance(date, str) else None
    if entry is None:
        raise ToolError(f"flight {flight_number} does not fly on {date!r} (dates are YYYY-MM-DD in June 2025)")
    if entry["status"] != "available":
        raise ToolError(f"flight {flight_number} on {date} is {entry['status']} and cannot be booked")
    i = CABINS.index(cabin)
    if entry["seats"][i] < seats:
        raise ToolError(f"flight {flight_number} on {date} has {entry['seats'][i]} {cabin} seats left, {seats} needed")
    return flight, entry["prices"][i]


def _check_route(segments: list[dict[str, Any]], origin: str, destination: str, flight_type: str) -> None:
    for a, b in zip(segments, segments[1:]):
        if a["destination"] != b["origin"]:
            raise ToolError(
                f"flight {b['flight_number']} leaves {b['origin']}, not {a['destination']} where the previous one lands"
            )
    ends = segments[-1]["destination"]
    if segments[0]["origin"] != origin:
        raise ToolError(f"the first flight must leave {origin}, not {segments[0]['origin']}")
    if flight_type == "one_way" and ends != destination:
        raise ToolError(f"a one-way trip must end at {destination}, not {ends}")
    if flight_type == "round_trip" and (ends != origin or destination not in [s["destination"] for s in segments]):
        raise ToolError(f"a round trip must reach {destination} and come back to {origin}")


def _seats(db: Database, segment: dict[str, Any], cabin: str, delta: int) -> None:
    entry = db["flights"][segment["flight_number"]]["dates"][segment["date"]]
    if "seats" in entry:  # flown or cancelled flights keep no seat count
        entry["seats"][CABINS.index(cabin)] += delta


def _payment_method(user: dict[str, Any], payment_id: Any, amount: int, for_booking: bool) -> dict[str, Any]:
    method = user["payment_methods"].get(payment_id) if isinstance(payment_id, str) else None
    if method is None:
        raise ToolError(f"payment method {payment_id!r} is not in the profile of {user['user_id']}")
    if method["source"] == "certificate" and not for_booking:
        raise ToolError("a travel certificate can only pay for a new booking")
    if method["source"] in ("gift_card", "certificate") and amount > method["amount"]:
        raise ToolError(f"{payment_id} has a balance of ${method['amount']}, less than ${amount}")
    return method


def _charge(user: dict[str, Any], payment_id: str, amount: int) -> None:
    """Take `amount` (negative: give back) from a gift card; a credit card keeps no balance here."""
    method = user["payment_methods"][payment_id]
    if method["source"] == "gift_card":
        method["amount"] -= amount


def _segment(flight: dict[str, Any], date: str, price: int) -> dict[str, Any]:
    return {
        "flight_number": flight["flight_number"],
        "date": date,
        "origin": flight["origin"],
        "destination": flight["destination"],
        "price": price,
    }


# ---- read tools ------------------------------------------------------------------------------


def get_user_details(db: Database, user_id: str) -> dict[str, Any]:
    """The user's profile, payment methods, saved passengers, membership and reservation ids."""
    return copy.deepcopy(_user(db, user_id))


def get_reservation_details(db: Database, reservation_id: str) -> dict[str, Any]:
    """The reservation, each flight shown with its current status on its date."""
    res = copy.deepcopy(_reservation(db, reservation_id, active=False))
    for seg in res["flights"]:
        seg["status"] = db["flights"][seg["flight_number"]]["dates"][seg["date"]]["status"]
    return res


def list_all_airports(db: Database) -> list[dict[str, str]]:
    return [dict(a) for a in db["airports"].values()]


def flight_offer(flight: dict[str, Any], date: str) -> dict[str, Any]:
    entry = flight["dates"][date]
    return {
        "flight_number": flight["flight_number"],
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": date,
        "departure": flight["departure"],
        "arrival": flight["arrival"],
        "available_seats": dict(zip(CABINS, entry["seats"])),
        "prices": dict(zip(CABINS, entry["prices"])),
    }


def _available_from(db: Database, origin: str, date: Any) -> list[dict[str, Any]]:
    if not isinstance(date, str) or not any(date in f["dates"] for f in db["flights"].values()):
        raise ToolError(f"no flights on {date!r}; dates are YYYY-MM-DD in June 2025")
    return [f for f in db["flights"].values() if f["origin"] == origin and f["dates"][date]["status"] == "available"]


def search_direct_flight(db: Database, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
    """Bookable direct flights from origin to destination on date, with seats and prices per cabin."""
    origin, destination = _airport(db, origin), _airport(db, destination)
    return [flight_offer(f, date) for f in _available_from(db, origin, date) if f["destination"] == destination]


def search_onestop_flight(db: Database, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
    """Bookable pairs [first leg, second leg] on date with at least an hour to connect."""
    origin, destination = _airport(db, origin), _airport(db, destination)
    pairs = []
    for a in _available_from(db, origin, date):
        if a["destination"] == destination:
            continue
        for b in _available_from(db, a["destination"], date):
            if (
                b["destination"] == destination
                and minutes_of(b["departure"]) >= minutes_of(a["arrival"]) + MIN_CONNECTION_MINUTES
            ):
                pairs.append([flight_offer(a, date), flight_offer(b, date)])
    return pairs


# ---- write tools -----------------------------------------------------------------------------


def book_reservation(
    db: Database,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict[str, Any]],
    passengers: list[dict[str, Any]],
    payment_methods: list[dict[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> dict[str, Any]:
    """Book a new reservation at today's prices; the payments must add up to the exact total."""
    user = _user(db, user_id)
    origin, destination = _airport(db, origin), _airport(db, destination)
    flight_type = _choice(flight_type, ("one_way", "round_trip"), "flight_type")
    cabin = _choice(cabin, CABINS, "cabin")
    insurance = _choice(insurance, ("yes", "no"), "insurance")
    people = _records(passengers, ("first_name", "last_name", "dob"), "passengers")
    payments = _records(payment_methods, ("payment_id", "amount"), "payment_methods")
    total_bags, nonfree = _count(total_baggages, "total_baggages"), _count(nonfree_baggages, "nonfree_baggages")
    if nonfree > total_bags:
        raise ToolError("nonfree_baggages cannot exceed total_baggages")
    n = len(people)
    segments = []
    for leg in _records(flights, ("flight_number", "date"), "flights"):
        flight, price = _bookable(db, leg["flight_number"], leg["date"], cabin, n)
        segments.append(_segment(flight, leg["date"], price))
    _check_route(segments, origin, destination, flight_type)
    total = (
        sum(s["price"] for s in segments) * n + (INSURANCE_PRICE * n if insurance == "yes" else 0) + BAG_PRICE * nonfree
    )
    for p in payments:
        p["amount"] = _count(p["amount"], "each payment amount")
        _payment_method(user, p["payment_id"], p["amount"], for_booking=True)
    if len({p["payment_id"] for p in payments}) < len(payments):
        raise ToolError("each payment method may appear once in payment_methods")
    paid = sum(p["amount"] for p in payments)
    if paid != total:
        raise ToolError(f"the payments add up to ${paid} but the reservation costs ${total}")
    # everything checked: now change the database
    for s in segments:
        _seats(db, s, cabin, -n)
    for p in payments:
        if user["payment_methods"][p["payment_id"]]["source"] == "certificate":
            del user["payment_methods"][p["payment_id"]]  # a certificate is used up whole
        else:
            _charge(user, p["payment_id"], p["amount"])
    rid = f"Z{db['counters']['reservation']:05d}"
    db["counters"]["reservation"] += 1
    res = {
        "reservation_id": rid,
        "user_id": user["user_id"],
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": segments,
        "passengers": people,
        "payment_history": payments,
        "created_at": db["now"],
        "total_baggages": total_bags,
        "nonfree_baggages": nonfree,
        "insurance": insurance,
        "status": "active",
    }
    db["reservations"][rid] = res
    user["reservations"].append(rid)
    return copy.deepcopy(res)


def update_reservation_flights(
    db: Database, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
) -> dict[str, Any]:
    """Replace the flights and/or cabin; kept flights keep their price, others cost today's price."""
    res = _reservation(db, reservation_id)
    user = db["users"][res["user_id"]]
    cabin = _choice(cabin, CABINS, "cabin")
    n = len(res["passengers"])
    old = {(s["flight_number"], s["date"]): s for s in res["flights"]}
    segments = []
    for leg in _records(flights, ("flight_number", "date"), "flights"):
        kept = old.get((leg["flight_number"], leg["date"]))
        if kept is not None and cabin == res["cabin"]:
            segments.append(dict(kept))
        else:
            flight, price = _bookable(db, leg["flight_number"], leg["date"], cabin, n)
            segments.append(_segment(flight, leg["date"], price))
    _check_route(segments, res["origin"], res["destination"], res["flight_type"])
    diff = (sum(s["price"] for s in segments) - sum(s["price"] for s in res["flights"])) * n
    _payment_method(user, payment_id, diff, for_booking=False)
    kept_keys = {(s["flight_number"], s["date"]) for s in segments} if cabin == res["cabin"] else set()
    for s in res["flights"]:
        if (s["flight_number"], s["date"]) not in kept_keys:
            _seats(db, s, res["cabin"], +n)
    for s in segments:
        if (s["flight_number"], s["date"]) not in kept_keys:
            _seats(db, s, cabin, -n)
    if diff:
        _charge(user, payment_id, diff)
        res["payment_history"].append({"payment_id": payment_id, "amount": diff})
    res["flights"], res["cabin"] = segments, cabin
    return get_reservation_details(db, reservation_id)


def update_reservation_baggages(
    db: Database, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> dict[str, Any]:
    """Add checked bags; each new non-free bag is charged to payment_id. Bags cannot be removed."""
    res = _reservation(db, reservation_id)
    user = db["users"][res["user_id"]]
    total_bags, nonfree = _count(total_baggages, "total_baggages"), _count(nonfree_baggages, "nonfree_baggages")
    if nonfree > total_bags:
        raise ToolError("nonfree_baggages cannot exceed total_baggages")
    if total_bags < res["total_baggages"] or nonfree < res["nonfree_baggages"]:
        raise ToolError(
            f"bags can only be added: the reservation has {res['total_baggages']} ({res['nonfree_baggages']} non-free)"
        )
    fee = (nonfree - res["nonfree_baggages"]) * BAG_PRICE
    _payment_method(user, payment_id, fee, for_booking=False)
    res["total_baggages"], res["nonfree_baggages"] = total_bags, nonfree
    if fee:
        _charge(user, payment_id, fee)
        res["payment_history"].append({"payment_id": payment_id, "amount": fee})
    return get_reservation_details(db, reservation_id)


def update_reservation_passengers(
    db: Database, reservation_id: str, passengers: list[dict[str, Any]]
) -> dict[str, Any]:
    """Replace the passengers' details; the number of passengers cannot change."""
    res = _reservation(db, reservation_id)
    people = _records(passengers, ("first_name", "last_name", "dob"), "passengers")
    if len(people) != len(res["passengers"]):
        raise ToolError(f"the reservation has {len(res['passengers'])} passengers; give exactly that many")
    res["passengers"] = people
    return get_reservation_details(db, reservation_id)


def cancel_reservation(db: Database, reservation_id: str) -> dict[str, Any]:
    """Cancel the whole reservation: refund every payment to its method (certificates are not refunded)."""
    res = _reservation(db, reservation_id)
    user = db["users"][res["user_id"]]
    refunds = [
        {"payment_id": p["payment_id"], "amount": -p["amount"]}
        for p in res["payment_history"]
        if p["amount"] and not p["payment_id"].startswith("certificate_")
    ]
    for r in refunds:
        _charge(user, r["payment_id"], r["amount"])
    res["payment_history"].extend(refunds)
    for s in res["flights"]:
        _seats(db, s, res["cabin"], +len(res["passengers"]))
    res["status"] = "cancelled"
    return get_reservation_details(db, reservation_id)


def send_certificate(db: Database, user_id: str, amount: int) -> str:
    """Add a travel certificate worth `amount` dollars to the user's payment methods."""
    user = _user(db, user_id)
    amount = _count(amount, "amount")
    if amount == 0:
        raise ToolError("amount must be positive")
    while True:  # ids come from a counter, so the same calls always give the same ids
        cid = f"certificate_9{db['counters']['certificate']:06d}"
        db["counters"]["certificate"] += 1
        if cid not in user["payment_methods"]:
            break
    user["payment_methods"][cid] = {"source": "certificate", "amount": amount}
    return f"Certificate {cid} of ${amount} added to the account of {user_id}."


def calculate(db: Database, expression: str) -> str:
    """Evaluate + - * / over numbers and parentheses (tau2's calculator); a whole result without decimals, so the
    total of a booking reads "417", the amount a payment must carry.

    >>> calculate({}, "(120 + 150) * 2 + 25 * 2 + 40 * 1")
    '630'
    """
    from art_core.envs.tau2.toolkit import calculate as tau2_calculate

    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("expression must be arithmetic text, e.g. '392 * 1 + 25 * 1'")
    try:
        value = float(tau2_calculate(db, expression))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError) as e:
        raise ToolError(f"cannot calculate {expression!r}: {e or type(e).__name__}") from None
    return str(int(value)) if value.is_integer() else str(value)


def transfer_to_human_agents(db: Database, summary: str) -> str:
    """Hand the customer to a human agent (ends the conversation)."""
    if not isinstance(summary, str) or not summary.strip():
        raise ToolError("summary must say, in a sentence, what the customer needs")
    return "Transfer successful"


# ---- registry and OpenAI function schemas ----------------------------------------------------

TOOLS = {
    fn.__name__: fn
    for fn in (
        get_user_details,
        get_reservation_details,
        list_all_airports,
        search_direct_flight,
        search_onestop_flight,
        book_reservation,
        update_reservation_flights,
        update_reservation_baggages,
        update_reservation_passengers,
        cancel_reservation,
        send_certificate,
        calculate,
        transfer_to_human_agents,
    )
}
WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "update_reservation_flights",
        "update_reservation_baggages",
        "update_reservation_passengers",
        "cancel_reservation",
        "send_certificate",
    }
)

_S = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}
_CABIN = {"type": "string", "enum": list(CABINS)}
_LEGS = {
    "type": "array",
    "description": "the flights in travel order",
    "items": {
        "type": "object",
        "properties": {"flight_number": _S, "date": {"type": "string", "description": "YYYY-MM-DD"}},
        "required": ["flight_number", "date"],
    },
}
_PEOPLE = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"first_name": _S, "last_name": _S, "dob": {"type": "string", "description": "YYYY-MM-DD"}},
        "required": ["first_name", "last_name", "dob"],
    },
}
_ARGS: dict[str, tuple[str, dict[str, Any]]] = {
    "get_user_details": (
        "Get a user's profile: name, membership, payment methods, saved passengers, reservation ids.",
        {"user_id": _S},
    ),
    "get_reservation_details": (
        "Get a reservation, with the current status of each of its flights.",
        {"reservation_id": _S},
    ),
    "list_all_airports": ("List every airport the airline serves, with its code and city.", {}),
    "search_direct_flight": (
        "Search bookable direct flights between two airports on a date.",
        {"origin": _S, "destination": _S, "date": {"type": "string", "description": "YYYY-MM-DD"}},
    ),
    "search_onestop_flight": (
        "Search bookable one-stop connections between two airports on a date.",
        {"origin": _S, "destination": _S, "date": {"type": "string", "description": "YYYY-MM-DD"}},
    ),
    "book_reservation": (
        "Book a reservation. The payments must add up to the exact total price.",
        {
            "user_id": _S,
            "origin": _S,
            "destination": _S,
            "flight_type": {"type": "string", "enum": ["one_way", "round_trip"]},
            "cabin": _CABIN,
            "flights": _LEGS,
            "passengers": _PEOPLE,
            "payment_methods": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"payment_id": _S, "amount": _INT},
                    "required": ["payment_id", "amount"],
                },
            },
            "total_baggages": _INT,
            "nonfree_baggages": _INT,
            "insurance": {"type": "string", "enum": ["yes", "no"]},
        },
    ),
    "update_reservation_flights": (
        "Change a reservation's flights and/or cabin; pass every flight of the new itinerary, kept ones too.",
        {
            "reservation_id": _S,
            "cabin": _CABIN,
            "flights": _LEGS,
            "payment_id": {
                "type": "string",
                "description": "a gift card or credit card from the profile, charged or refunded the difference",
            },
        },
    ),
    "update_reservation_baggages": (
        "Set a reservation's checked bags (only increases); new non-free bags are charged.",
        {
            "reservation_id": _S,
            "total_baggages": _INT,
            "nonfree_baggages": _INT,
            "payment_id": _S,
        },
    ),
    "update_reservation_passengers": (
        "Replace the passengers' details; the number of passengers must stay the same.",
        {"reservation_id": _S, "passengers": _PEOPLE},
    ),
    "cancel_reservation": ("Cancel a whole reservation and refund its payments.", {"reservation_id": _S}),
    "send_certificate": (
        "Give the user a travel certificate worth a number of dollars.",
        {"user_id": _S, "amount": _INT},
    ),
    "calculate": (
        "Compute an arithmetic expression (numbers, + - * /, parentheses), e.g. a booking's total price.",
        {"expression": {"type": "string", "description": "e.g. '(120 + 150) * 2 + 25 * 2 + 40 * 1'"}},
    ),
    "transfer_to_human_agents": (
        "Transfer the customer to a human agent, with a summary of the issue.",
        {"summary": _S},
    ),
}
TOOL_SCHEMAS = [function_schema(name, desc, props) for name, (desc, props) in _ARGS.items()]
