"""tau2-bench's airline tools on tau2's own airline database, and `load_environment` for `tau2-airline`.

The 14 tools have tau2's names, arguments and behaviour on tau2's layout (flight dates keyed by day,
seats and prices by cabin). The bag fee, the insurance price and "now" are read from the loaded
policy.md, so a policy edit moves the prices the tools charge. tau2's semantics are kept where they
differ from our own `airline`: a cancellation appends a negative entry per payment and releases no seat,
bags may be set to any count (only extra non-free bags are charged), new ids are HATHAT/HATHAU/HATHAV and
certificate_3221322..24, and a one-stop search looks for the second leg on the next day only when the
first arrives "+1" (written as tau2 writes that date).

    >>> from art_core.envs.tau2.data import load_tau2_data
    >>> rules = AirlineRules.from_policy(load_tau2_data("airline").policy)
    >>> rules.bag_fee, rules.insurance_fee, rules.now
    (50, 30, '2024-05-15T15:00:00')
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from art_core.envs.tau2.airline_schemas import SCHEMAS
from art_core.envs.tau2.env import TRAIN_ONLY_OPTIONS  # noqa: F401  (evaluation_options reads it here)
from art_core.envs.tau2.toolkit import as_int, as_record, calculate, transfer_to_human_agents
from art_core.envs.tool_use.tools import ToolFn

Db = dict[str, Any]
CABINS = ("basic_economy", "economy", "business")
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
AIRPORTS = [  # tau2's list_all_airports answers with this fixed list, not with the database
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
]


@dataclass(frozen=True)
class AirlineRules:
    """The numbers the tools charge, read from the policy text."""

    bag_fee: int
    insurance_fee: int
    now: str  # ISO timestamp of the policy's "current time", stamped on new reservations

    @classmethod
    def from_policy(cls, policy: str) -> "AirlineRules":
        """Parse the fee sentences and the current time; a policy without them is refused, not guessed."""
        bag = re.search(r"extra bag\w*\s+is\s+\$?(\d+)\s*dollars?", policy, re.I)
        insurance = re.search(r"insurance is\s+\$?(\d+)\s*dollars? per passenger", policy, re.I)
        now = re.search(r"current time is (\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})", policy)
        missing = [
            name
            for name, m in (("the extra-bag fee", bag), ("the insurance price", insurance), ("the current time", now))
            if not m
        ]
        if missing:
            raise ValueError(
                f"the airline policy does not state {', '.join(missing)} in tau2's wording; cannot price bookings"
            )
        return cls(
            bag_fee=int(bag.group(1)), insurance_fee=int(insurance.group(1)), now=f"{now.group(1)}T{now.group(2)}"
        )


def _user(db: Db, user_id: str) -> dict[str, Any]:
    if user_id not in db["users"]:
        raise ValueError(f"User {user_id} not found")
    return db["users"][user_id]


def _reservation(db: Db, reservation_id: str) -> dict[str, Any]:
    if reservation_id not in db["reservations"]:
        raise ValueError(f"Reservation {reservation_id} not found")
    return db["reservations"][reservation_id]


def _flight(db: Db, flight_number: str) -> dict[str, Any]:
    if flight_number not in db["flights"]:
        raise ValueError(f"Flight {flight_number} not found")
    return db["flights"][flight_number]


def _flight_day(db: Db, flight_number: str, date: str) -> dict[str, Any]:
    flight = _flight(db, flight_number)
    if date not in flight["dates"]:
        raise ValueError(f"Flight {flight_number} not found on date {date}")
    return flight["dates"][date]


def _cabin(cabin: str) -> str:
    if cabin not in CABINS:
        raise ValueError(f"cabin must be one of {', '.join(CABINS)}, got {cabin!r}")
    return cabin


def _search(
    db: Db, date: str, origin: str | None, destination: str | None, leave_after: str | None = None
) -> list[dict[str, Any]]:
    out = []
    for f in db["flights"].values():
        day = f["dates"].get(date)
        if day is None or day["status"] != "available":
            continue
        if (
            (origin is None or f["origin"] == origin)
            and (destination is None or f["destination"] == destination)
            and (leave_after is None or f["scheduled_departure_time_est"] >= leave_after)
        ):
            out.append(
                {
                    "flight_number": f["flight_number"],
                    "origin": f["origin"],
                    "destination": f["destination"],
                    "status": "available",
                    "scheduled_departure_time_est": f["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
                    "date": None,
                    "available_seats": day["available_seats"],
                    "prices": day["prices"],
                }
            )
    return out


def _charge_for_update(user: dict[str, Any], payment_id: str, total: int) -> dict[str, Any] | None:
    """Charge (or refund, when negative) one change to one method; a certificate is refused."""
    if payment_id not in user["payment_methods"]:
        raise ValueError("Payment method not found")
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        raise ValueError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < total:
        raise ValueError("Gift card balance is not enough")
    if method["source"] == "gift_card":
        method["amount"] -= total
    return {"payment_id": payment_id, "amount": total} if total != 0 else None


# ---- reads ------------------------------------------------------------------------------------


def get_reservation_details(db: Db, reservation_id: str) -> dict[str, Any]:
    return _reservation(db, reservation_id)


def get_user_details(db: Db, user_id: str) -> dict[str, Any]:
    return _user(db, user_id)


def list_all_airports(db: Db) -> list[dict[str, str]]:
    return [{"iata": code, "city": city} for code, city in AIRPORTS]


def search_direct_flight(db: Db, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
    return _search(db, date, origin, destination)


def search_onestop_flight(db: Db, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
    out = []
    for first in _search(db, date, origin, None):
        first["date"] = date
        # tau2 writes the next day without zero padding ("2024-05-9" never matches): kept for comparability
        date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in first["scheduled_arrival_time_est"] else date
        for second in _search(
            db, date2, first["destination"], destination, leave_after=first["scheduled_arrival_time_est"]
        ):
            second["date"] = date2
            out.append([first, second])
    return out


def get_flight_status(db: Db, flight_number: str, date: str) -> str:
    return _flight_day(db, flight_number, date)["status"]


# ---- writes -----------------------------------------------------------------------------------


def book_reservation(
    db: Db,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list,
    passengers: list,
    payment_methods: list,
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
    *,
    rules: AirlineRules,
) -> dict[str, Any]:
    flights = [as_record(f, ("flight_number", "date"), "each flight") for f in flights]
    passengers = [as_record(p, ("first_name", "last_name", "dob"), "each passenger") for p in passengers]
    payments = [
        {**as_record(p, ("payment_id",), "each payment"), "amount": as_int(p.get("amount"), "a payment's amount")}
        for p in payment_methods
    ]
    if flight_type not in ("one_way", "round_trip"):
        raise ValueError(f"flight_type must be 'one_way' or 'round_trip', got {flight_type!r}")
    if insurance not in ("yes", "no"):
        raise ValueError(f"insurance must be 'yes' or 'no', got {insurance!r}")
    cabin, total_baggages, nonfree_baggages = (
        _cabin(cabin),
        as_int(total_baggages, "total_baggages"),
        as_int(nonfree_baggages, "nonfree_baggages"),
    )
    user = _user(db, user_id)
    reservation_id = next((r for r in NEW_RESERVATION_IDS if r not in db["reservations"]), None)
    if reservation_id is None:
        raise ValueError("Too many reservations")
    booked, days, total = [], [], 0
    for info in flights:
        flight = _flight(db, info["flight_number"])
        day = _flight_day(db, info["flight_number"], info["date"])
        if day["status"] != "available":
            raise ValueError(f"Flight {info['flight_number']} not available on date {info['date']}")
        if day["available_seats"][cabin] < len(passengers):
            raise ValueError(f"Not enough seats on flight {info['flight_number']}")
        price = day["prices"][cabin]
        booked.append(
            {
                "origin": flight["origin"],
                "destination": flight["destination"],
                "flight_number": info["flight_number"],
                "date": info["date"],
                "price": price,
            }
        )
        days.append(day)
        total += price * len(passengers)
    if insurance == "yes":
        total += rules.insurance_fee * len(passengers)
    total += rules.bag_fee * nonfree_baggages
    for p in payments:
        if p["payment_id"] not in user["payment_methods"]:
            raise ValueError(f"Payment method {p['payment_id']} not found")
        method = user["payment_methods"][p["payment_id"]]
        if method["source"] in ("gift_card", "certificate") and method["amount"] < p["amount"]:
            raise ValueError(f"Not enough balance in payment method {p['payment_id']}")
    paid = sum(p["amount"] for p in payments)
    if paid != total:
        raise ValueError(f"Payment amount does not add up, total price is {total}, but paid {paid}")
    for p in payments:
        method = user["payment_methods"][p["payment_id"]]
        if method["source"] == "gift_card":
            method["amount"] -= p["amount"]
        elif method["source"] == "certificate":
            user["payment_methods"].pop(p["payment_id"])  # a certificate is used up whole
    for day in days:
        day["available_seats"][cabin] -= len(passengers)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": booked,
        "passengers": copy.deepcopy(passengers),
        "payment_history": copy.deepcopy(payments),
        "created_at": rules.now,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
        "status": None,
    }
    db["reservations"][reservation_id] = reservation
    user["reservations"].append(reservation_id)
    return reservation


def cancel_reservation(db: Db, reservation_id: str) -> dict[str, Any]:
    reservation = _reservation(db, reservation_id)
    refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"  # no seat is released and no gift card credited, as in tau2
    return reservation


def send_certificate(db: Db, user_id: str, amount: int) -> str:
    user = _user(db, user_id)
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        raise ValueError(f"amount must be a number, got {amount!r}")
    value = float(amount)  # a certificate's amount is a float in tau2's model
    for certificate_id in NEW_CERTIFICATE_IDS:
        if certificate_id not in user["payment_methods"]:
            user["payment_methods"][certificate_id] = {"source": "certificate", "id": certificate_id, "amount": value}
            return f"Certificate {certificate_id} added to user {user_id} with amount {amount}."
    raise ValueError("Too many certificates")


def update_reservation_baggages(
    db: Db, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str, *, rules: AirlineRules
) -> dict[str, Any]:
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    total_baggages, nonfree_baggages = (
        as_int(total_baggages, "total_baggages"),
        as_int(nonfree_baggages, "nonfree_baggages"),
    )
    payment = _charge_for_update(
        user, payment_id, rules.bag_fee * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    )
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    return reservation


def update_reservation_flights(
    db: Db, reservation_id: str, cabin: str, flights: list, payment_id: str
) -> dict[str, Any]:
    flights = [as_record(f, ("flight_number", "date"), "each flight") for f in flights]
    cabin = _cabin(cabin)
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    n = len(reservation["passengers"])
    total, new_flights = 0, []
    for info in flights:
        # a segment kept in the same cabin keeps the price it was booked at
        kept = next(
            (
                f
                for f in reservation["flights"]
                if f["flight_number"] == info["flight_number"]
                and f["date"] == info["date"]
                and cabin == reservation["cabin"]
            ),
            None,
        )
        if kept is not None:
            total += kept["price"] * n
            new_flights.append(kept)
            continue
        flight = _flight(db, info["flight_number"])
        day = _flight_day(db, info["flight_number"], info["date"])
        if day["status"] != "available":
            raise ValueError(f"Flight {info['flight_number']} not available on date {info['date']}")
        if day["available_seats"][cabin] < n:
            raise ValueError(f"Not enough seats on flight {info['flight_number']}")
        segment = {
            "flight_number": info["flight_number"],
            "date": info["date"],
            "price": day["prices"][cabin],
            "origin": flight["origin"],
            "destination": flight["destination"],
        }
        total += segment["price"] * n
        new_flights.append(segment)
    total -= sum(f["price"] for f in reservation["flights"]) * n
    payment = _charge_for_update(user, payment_id, total)
    if payment is not None:
        reservation["payment_history"].append(payment)
    reservation["flights"] = new_flights
    reservation["cabin"] = cabin
    return reservation


def update_reservation_passengers(db: Db, reservation_id: str, passengers: list) -> dict[str, Any]:
    passengers = [as_record(p, ("first_name", "last_name", "dob"), "each passenger") for p in passengers]
    reservation = _reservation(db, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise ValueError("Number of passengers does not match")
    reservation["passengers"] = passengers
    return reservation


WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)


def make_tools(rules: AirlineRules) -> dict[str, ToolFn]:
    """The 14 tools, with the priced ones bound to the policy's fees."""
    plain = (
        calculate,
        cancel_reservation,
        get_reservation_details,
        get_user_details,
        list_all_airports,
        search_direct_flight,
        search_onestop_flight,
        send_certificate,
        transfer_to_human_agents,
        update_reservation_flights,
        update_reservation_passengers,
        get_flight_status,
    )
    tools: dict[str, ToolFn] = {f.__name__: f for f in plain}
    tools["book_reservation"] = partial(book_reservation, rules=rules)
    tools["update_reservation_baggages"] = partial(update_reservation_baggages, rules=rules)
    return tools


def tools_for_policy(policy: str) -> dict[str, ToolFn]:
    """The tools priced by this policy text (its fees and current time); a policy without them is refused.

    tools = tools_for_policy(load_tau2_data("airline").policy)
    tools["book_reservation"](db, ...)   # charges the policy's bag fee and insurance price
    """
    return make_tools(AirlineRules.from_policy(policy))


def load_environment(**options: Any):
    """The `tau2-airline` environment; options are `Tau2Options` fields (data_dir, user, judge, ...)."""
    from art_core.envs.tau2.env import Tau2Env, Tau2Tools

    return Tau2Env(
        Tau2Tools(
            name="tau2-airline",
            domain="airline",
            tools=None,
            schemas=SCHEMAS,
            write_tools=WRITE_TOOLS,
            make_tools=tools_for_policy,
        ),
        **options,
    )
