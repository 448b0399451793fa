"""The airline expert: a policy written in code that handles a customer the way policy.md says.

It starts from the customer's opening message and learns everything else from the conversation: it asks for the
user id and reads the profile, asks for what the request needs, reads reservations and searches flights with the
read tools, works out prices, bag fees and refunds by the policy's rules (fare tables, free bags, $40 a bag, $25
insurance), declines what the policy forbids, proposes each change with every id and amount it involves and
waits for a yes, then makes it. It never writes an id it has not read in a customer message or a tool result.

    from art_core.envs.customer_service.policies import PolicyClient
    trajectory = await load_environment().rollout(PolicyClient(play), "expert", scenario)

Compensation: the scripted customer complains about a disrupted flight without saying "compensation", so the
expert checks eligibility and proposes the certificate itself (policy.md asks it to wait for the customer's ask).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from art_core.envs.airline.db import BAG_PRICE, FREE_BAGS, INSURANCE_PRICE, NOW
from art_core.envs.customer_service.policies import CannotDemonstrate, Play, ask, call

CONFIRM = "Shall I proceed? (yes/no)"
CABIN_WORDS = {
    "basic economy": "basic_economy",
    "economy": "economy",
    "business class": "business",
    "business": "business",
}
_DATE = r"\d{4}-\d{2}-\d{2}"


def facts(reply: str) -> dict[str, str]:
    """What the customer said, as {"user id": "ava_kim_1234", ...} from "My user id is ava_kim_1234. My ..."."""
    return dict(re.findall(r"My ([a-z ]+?) is (.*?)\.(?=\s+[A-Z]|$)", reply.strip()))


def _fact(reply: str, key: str) -> str:
    value = facts(reply).get(key)
    if value is None:
        raise CannotDemonstrate(f"the customer did not give their {key}: {reply!r}")
    return value


def _payment_ids(reply: str) -> list[str]:
    """The payment ids of "Please use certificate_1234567, credit_card_7654321." (the customer's own phrase)."""
    m = re.search(r"Please use (.+?)\.(?:\s|$)", reply)
    if m is None:
        raise CannotDemonstrate(f"the customer did not give a payment method: {reply!r}")
    return [p.strip() for p in m.group(1).split(",")]


def _yes(reply: str) -> None:
    if not reply.lower().startswith("yes"):
        raise CannotDemonstrate(f"the customer did not agree: {reply!r}")


def _n(count: int, word: str) -> str:
    """ "1 passenger", "2 passengers" """
    return f"{count} {word}" + ("" if count == 1 else "s")


def _sum(fares: list[int]) -> str:
    """ "146", or "120 + 150 = 270" """
    return str(fares[0]) if len(fares) == 1 else f"{' + '.join(map(str, fares))} = {sum(fares)}"


def _legs(legs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{leg['flight_number']} on {leg['date']}" for leg in legs)


def _people(people: list[dict[str, str]]) -> str:
    return ", ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in people)


def play(opening: str) -> Play:
    """The expert's side of one airline conversation (see the module docstring)."""
    reply = yield from ask("I'd be glad to help. First, could you give me your user id?")
    user = yield from call("get_user_details", user_id=_fact(reply, "user id"))
    request = opening.lower()
    if "like to book" in request:
        yield from _book(user, request)
    elif "change the date" in request:
        yield from _change_date(user)
    elif "switch my reservation to" in request:
        yield from _change_cabin(user, request)
    elif "checked bags" in request:
        yield from _add_bags(user)
    elif "correct a passenger" in request:
        yield from _passengers(user)
    elif "cancel a reservation" in request:
        yield from _cancel(user)
    elif "not happy" in request:
        yield from _compensation(user)
    elif "how much is a flight" in request:
        yield from _quote(user, request)
    else:
        raise CannotDemonstrate(f"no procedure for the request {opening!r}")


def _reservation(user: dict[str, Any], question: str) -> Play:
    """Ask `question` (it asks for the reservation id among other things); read it. Returns (reservation, reply)."""
    reply = yield from ask(question)
    res = yield from call("get_reservation_details", reservation_id=_fact(reply, "reservation id"))
    if res["user_id"] != user["user_id"] or res["status"] != "active":
        raise CannotDemonstrate(f"reservation {res['reservation_id']} is not an active one of this customer")
    return res, reply


def _airports(request: str) -> Play:
    """(origin code, destination code) of "... from <city> to <city>...", through list_all_airports."""
    m = re.search(r"from (.+?) to (.+?)[.?]", request)
    if m is None:
        raise CannotDemonstrate(f"no cities in {request!r}")
    airports = yield from call("list_all_airports")
    code = {a["city"].lower(): a["code"] for a in airports}
    if m.group(1) not in code or m.group(2) not in code:
        raise CannotDemonstrate(f"unknown cities in {request!r}")
    return code[m.group(1)], code[m.group(2)]


def _offer(offers: list[dict[str, Any]], flight_number: str) -> dict[str, Any]:
    found = [o for o in offers if o["flight_number"] == flight_number]
    if not found:
        raise CannotDemonstrate(f"flight {flight_number} is not bookable then")
    return found[0]


def _book(user: dict[str, Any], request: str) -> Play:
    origin, destination = yield from _airports(request)
    trip = "round_trip" if "round trip" in request else "one_way"
    # one question for everything the booking needs, so the call to `calculate` costs no extra turn
    reply = yield from ask(
        "Which flights would you like (flight numbers and dates), in which cabin, and who are the passengers? "
        "How many total baggages will you check, do you want travel insurance, and which payment method will you use?"
    )
    legs = [{"flight_number": f, "date": d} for f, d in re.findall(rf"(\w+) on ({_DATE})", _fact(reply, "flights"))]
    cabin = _fact(reply, "cabin")
    named = _fact(reply, "passengers")
    people = [dict(user["name"], dob=user["dob"])] if "yourself" in named else []
    people += [
        {"first_name": f, "last_name": l, "dob": d} for f, l, d in re.findall(rf"(\S+) (\S+) \(born ({_DATE})\)", named)
    ]
    n = len(people)
    if trip == "one_way" and len(legs) == 1:
        offers = [
            _offer(
                (yield from call("search_direct_flight", origin=origin, destination=destination, date=legs[0]["date"])),
                legs[0]["flight_number"],
            )
        ]
    elif trip == "one_way" and len(legs) == 2:
        pairs = yield from call("search_onestop_flight", origin=origin, destination=destination, date=legs[0]["date"])
        numbers = [leg["flight_number"] for leg in legs]
        found = [p for p in pairs if [o["flight_number"] for o in p] == numbers]
        if not found:
            raise CannotDemonstrate(f"no connection {numbers} on {legs[0]['date']}")
        offers = found[0]
    elif trip == "round_trip" and len(legs) == 2:
        out = yield from call("search_direct_flight", origin=origin, destination=destination, date=legs[0]["date"])
        back = yield from call("search_direct_flight", origin=destination, destination=origin, date=legs[1]["date"])
        offers = [_offer(out, legs[0]["flight_number"]), _offer(back, legs[1]["flight_number"])]
    else:
        raise CannotDemonstrate(f"no search for a {trip} trip of {len(legs)} flights")
    if any(o["available_seats"][cabin] < n for o in offers):
        raise CannotDemonstrate("not enough seats")
    fares = [o["prices"][cabin] for o in offers]
    bags = int(_fact(reply, "total baggages"))
    insurance = _fact(reply, "insurance")
    methods = _payment_ids(reply)
    free = FREE_BAGS[user["membership"]][cabin] * n
    nonfree = max(0, bags - free)
    insured = INSURANCE_PRICE * n if insurance == "yes" else 0
    total = sum(fares) * n + insured + BAG_PRICE * nonfree
    # the arithmetic goes to the calculator: a model copies the numbers into the expression and the result into
    # the payment, instead of adding them up in its head
    fare_sum = " + ".join(map(str, fares))
    expression = " + ".join(
        [f"({fare_sum}) * {n}" if len(fares) > 1 else f"{fare_sum} * {n}"]
        + ([f"{INSURANCE_PRICE} * {n}"] if insured else [])
        + ([f"{BAG_PRICE} * {nonfree}"] if nonfree else [])
    )
    calculated = yield from call("calculate", expression=expression)
    if str(calculated) != str(total):
        raise CannotDemonstrate(f"calculate gave {calculated} for {expression}, the expert {total}")
    payments, left = [], total
    for i, pid in enumerate(methods):
        method = user["payment_methods"].get(pid)
        if method is None:
            raise CannotDemonstrate(f"{pid} is not in the profile")
        amount = left if i == len(methods) - 1 else min(left, method.get("amount", left))
        payments.append({"payment_id": pid, "amount": amount})
        left -= amount
    if any(user["payment_methods"][p["payment_id"]].get("amount", p["amount"]) < p["amount"] for p in payments):
        raise CannotDemonstrate("the payment methods cannot cover the total")
    certificate = any(p["payment_id"].startswith("certificate_") for p in payments)
    reply = yield from ask(
        f"Here is the booking: a {trip} trip from {origin} to {destination} in {cabin}, flights {_legs(legs)}, for "
        f"{_people(people)}; {_n(bags, 'checked bag')} in total, {free} of them free for a {user['membership']} member, so "
        f"{nonfree} non-free; travel insurance: {insurance}. Price: the {cabin} fare {fare_sum} per passenger x "
        f"{_n(n, 'passenger')}, insurance {insured}, non-free bags {nonfree} x {BAG_PRICE}; total {total}. Payment: "
        + ", ".join(f"{p['payment_id']} pays {p['amount']}" for p in payments)
        + (" (a certificate is used up whole: whatever is left on it is lost)" if certificate else "")
        + ". Shall I book it? (yes/no)"
    )
    _yes(reply)
    booked = yield from call(
        "book_reservation",
        user_id=user["user_id"],
        origin=origin,
        destination=destination,
        flight_type=trip,
        cabin=cabin,
        flights=legs,
        passengers=people,
        payment_methods=payments,
        total_baggages=bags,
        nonfree_baggages=nonfree,
        insurance=insurance,
    )
    yield from ask(f"Done: your reservation {booked['reservation_id']} is booked, for a total of {total}.")


def _fares(res: dict[str, Any], legs: list[dict[str, Any]], cabin: str) -> Play:
    """Today's fare in `cabin` of each leg (origin and destination as in the reservation's segments)."""
    ends = {s["flight_number"]: (s["origin"], s["destination"]) for s in res["flights"]}
    fares = []
    for leg in legs:
        origin, destination = ends[leg["flight_number"]]
        offers = yield from call("search_direct_flight", origin=origin, destination=destination, date=leg["date"])
        offer = _offer(offers, leg["flight_number"])
        if offer["available_seats"][cabin] < len(res["passengers"]):
            raise CannotDemonstrate(f"not enough {cabin} seats on {leg['flight_number']}")
        fares.append(offer["prices"][cabin])
    return fares


def _difference(diff: int) -> str:
    return f"you pay {diff}" if diff > 0 else f"you get {-diff} back" if diff < 0 else "nothing to pay"


def _payer(user: dict[str, Any], reply: str, amount: int, purpose: str) -> str:
    """The one payment id in the customer's reply, if it may pay `amount` (not a certificate, a gift card only
    with enough on it); else the task cannot be demonstrated."""
    (pid,) = _payment_ids(reply)
    method = user["payment_methods"].get(pid)
    if (
        method is None
        or method["source"] == "certificate"
        or (method["source"] == "gift_card" and method["amount"] < amount)
    ):
        raise CannotDemonstrate(f"{pid} cannot {purpose}")
    return pid


def _update_flights(
    user: dict[str, Any], res: dict[str, Any], cabin: str, legs: list[dict[str, Any]], diff: int, what: str
) -> Play:
    rid = res["reservation_id"]
    reply = yield from ask(
        f"{what} The fare difference for {_n(len(res['passengers']), 'passenger')} is {diff} ({_difference(diff)}). Which "
        "payment method, a gift card or a credit card, would you like to use for it?"
    )
    pid = _payer(user, reply, diff, "settle the difference")
    reply = yield from ask(
        f"I will change the flights of reservation {rid} to {_legs(legs)} in {cabin}, with the fare difference of "
        f"{diff} settled with {pid}. {CONFIRM}"
    )
    _yes(reply)
    yield from call("update_reservation_flights", reservation_id=rid, cabin=cabin, flights=legs, payment_id=pid)
    yield from ask(f"Done: reservation {rid} now has flights {_legs(legs)} in {cabin}; the fare difference was {diff}.")


def _change_date(user: dict[str, Any]) -> Play:
    res, reply = yield from _reservation(user, "What is the reservation id, and which new date would you like?")
    if res["cabin"] == "basic_economy":
        yield from ask("I'm sorry, but basic economy bookings cannot change flights, so I am unable to move this trip.")
        return
    if any(s["status"] != "available" for s in res["flights"]):
        raise CannotDemonstrate("a flight of the reservation is no longer available to change")
    new_date = _fact(reply, "new date")
    old = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
    last = old[-1]["date"]
    moved = [i for i, leg in enumerate(old) if res["flight_type"] == "one_way" or leg["date"] == last]
    legs = [dict(leg, date=new_date) if i in moved else leg for i, leg in enumerate(old)]
    fares = yield from _fares(res, [legs[i] for i in moved], res["cabin"])
    diff = (sum(fares) - sum(res["flights"][i]["price"] for i in moved)) * len(res["passengers"])
    part = "your trip" if res["flight_type"] == "one_way" else "your return flight"
    what = f"Moving {part} to {new_date} on the same flights costs today's fares: {_sum(fares)} per passenger."
    yield from _update_flights(user, res, res["cabin"], legs, diff, what)


def _change_cabin(user: dict[str, Any], request: str) -> Play:
    m = re.search(r"switch my reservation to (.+?)\?", request)
    if m is None or m.group(1) not in CABIN_WORDS:
        raise CannotDemonstrate(f"no cabin in {request!r}")
    cabin = CABIN_WORDS[m.group(1)]
    res, _ = yield from _reservation(user, "What is the reservation id?")
    if any(s["status"] != "available" for s in res["flights"]):
        raise CannotDemonstrate("a flight of the reservation is no longer available to change")
    legs = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
    fares = yield from _fares(res, legs, cabin)
    diff = (sum(fares) - sum(s["price"] for s in res["flights"])) * len(res["passengers"])
    what = f"In {cabin} every flight costs today's fare: {_sum(fares)} per passenger."
    yield from _update_flights(user, res, cabin, legs, diff, what)


def _add_bags(user: dict[str, Any]) -> Play:
    res, reply = yield from _reservation(
        user, "What is the reservation id, and how many extra bags would you like to add?"
    )
    rid, n = res["reservation_id"], len(res["passengers"])
    extra = int(_fact(reply, "extra bags"))
    total = res["total_baggages"] + extra
    free = FREE_BAGS[user["membership"]][res["cabin"]] * n
    nonfree = max(res["nonfree_baggages"], total - free)
    fee = (nonfree - res["nonfree_baggages"]) * BAG_PRICE
    reply = yield from ask(
        f"With {extra} more the reservation has {_n(total, 'checked bag')}; {free} are free for a {user['membership']} "
        f"member in {res['cabin']}, so {nonfree} are non-free and the fee is {fee} "
        f"({nonfree - res['nonfree_baggages']} new non-free x {BAG_PRICE}). Which payment method would you like "
        "to use for it?"
    )
    pid = _payer(user, reply, fee, "pay the fee")
    reply = yield from ask(
        f"I will update the baggage of reservation {rid} to {total} bags in total, {nonfree} of them non-free, and "
        f"charge the fee of {fee} to {pid}. {CONFIRM}"
    )
    _yes(reply)
    yield from call(
        "update_reservation_baggages",
        reservation_id=rid,
        total_baggages=total,
        nonfree_baggages=nonfree,
        payment_id=pid,
    )
    yield from ask(f"Done: reservation {rid} now has {total} checked bags; the fee was {fee}.")


def _passengers(user: dict[str, Any]) -> Play:
    res, reply = yield from _reservation(user, "What is the reservation id, and what correction do you need?")
    rid = res["reservation_id"]
    fix = _fact(reply, "correction")
    people = [dict(p) for p in res["passengers"]]
    dob = re.fullmatch(rf"the date of birth of (\S+) (\S+) is wrong: it should be ({_DATE})", fix)
    name = re.fullmatch(r"(\S+) (\S+)'s last name should be (\S+)", fix)
    m = dob or name
    if m is None:
        raise CannotDemonstrate(f"cannot read the correction {fix!r}")
    who = [p for p in people if (p["first_name"], p["last_name"]) == (m.group(1), m.group(2))]
    if len(who) != 1:
        raise CannotDemonstrate(f"{len(who)} passengers are called {m.group(1)} {m.group(2)}")
    who[0]["dob" if dob else "last_name"] = m.group(3)
    reply = yield from ask(f"I will update the passengers of reservation {rid} to: {_people(people)}. {CONFIRM}")
    _yes(reply)
    yield from call("update_reservation_passengers", reservation_id=rid, passengers=people)
    yield from ask(f"Done: the passengers of reservation {rid} are now {_people(people)}.")


def _cancel(user: dict[str, Any]) -> Play:
    res, _ = yield from _reservation(user, "What is the reservation id, and what is the reason for cancelling?")
    rid = res["reservation_id"]
    if any(s["status"] == "landed" for s in res["flights"]):
        yield from ask("I'm sorry, but a flight of this booking has already departed, so it cannot be cancelled.")
        return
    now = datetime.fromisoformat(NOW)  # policy.md: "The current time is 2025-06-12 15:00"
    grounds = [
        (datetime.fromisoformat(res["created_at"]) > now - timedelta(hours=24), "it was booked less than 24 hours ago"),
        (any(s["status"] == "cancelled" for s in res["flights"]), "the airline cancelled one of its flights"),
        (res["cabin"] == "business", "it is in business class"),
        (res["insurance"] == "yes", "it has travel insurance"),
    ]
    why = [text for holds, text in grounds if holds]
    if not why:
        yield from ask(
            "I'm sorry, but I cannot cancel this booking: it was made more than 24 hours ago, the airline has not "
            "cancelled any of its flights, it is not in business class and it has no travel insurance. A change of "
            "plans is not enough under our policy."
        )
        return
    reply = yield from ask(
        f"Reservation {rid} can be cancelled because {why[0]}. I will cancel the whole reservation; payments go "
        f"back to their original methods (gift cards at once, credit cards within 5 to 7 business days). {CONFIRM}"
    )
    _yes(reply)
    yield from call("cancel_reservation", reservation_id=rid)
    yield from ask(f"Done: reservation {rid} is cancelled.")


def _compensation(user: dict[str, Any]) -> Play:
    res, _ = yield from _reservation(user, "I'm sorry to hear that. What is the reservation id?")
    statuses = [s["status"] for s in res["flights"]]
    if "cancelled" not in statuses and "delayed" not in statuses:
        raise CannotDemonstrate("no flight of the reservation was cancelled or delayed")
    eligible = user["membership"] in ("silver", "gold") or res["insurance"] == "yes" or res["cabin"] == "business"
    if not eligible:
        yield from ask(
            "I'm sorry, but a regular member without travel insurance outside business class is not eligible for "
            "compensation, so I cannot send a certificate."
        )
        return
    each, event = (100, "the airline cancelled a flight") if "cancelled" in statuses else (50, "a flight was delayed")
    n = len(res["passengers"])
    reply = yield from ask(
        f"Since {event} of reservation {res['reservation_id']}, you are eligible for a travel certificate of "
        f"{each} x {_n(n, 'passenger')} = {each * n}. Shall I send it? (yes/no)"
    )
    _yes(reply)
    yield from call("send_certificate", user_id=user["user_id"], amount=each * n)
    yield from ask(f"Done: a travel certificate of {each * n} is in your account.")


def _quote(user: dict[str, Any], request: str) -> Play:
    origin, destination = yield from _airports(request)
    reply = yield from ask("Which date, which cabin, and what departure time are you looking at?")
    date, cabin, time = _fact(reply, "date"), _fact(reply, "cabin"), _fact(reply, "departure time")
    offers = yield from call("search_direct_flight", origin=origin, destination=destination, date=date)
    found = [o for o in offers if o["departure"].startswith(time)]
    if len(found) != 1:
        raise CannotDemonstrate(f"{len(found)} flights leave {origin} at {time} on {date}")
    fare = found[0]["prices"][cabin]
    yield from ask(
        f"The {cabin} fare of flight {found[0]['flight_number']} from {origin} to {destination} on {date}, leaving at "
        f"{time}, is {fare}."
    )
