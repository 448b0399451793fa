"""OpenAI function schemas of tau2's 14 airline tools (names, arguments and types as tau2 declares them).

>>> sorted(s["function"]["name"] for s in SCHEMAS)[:3]
['book_reservation', 'calculate', 'cancel_reservation']
"""

from __future__ import annotations

from typing import Any

from art_core.envs.tau2.toolkit import CALCULATE_SCHEMA, TRANSFER_SCHEMA, integer, string
from art_core.envs.tool_use.tools import function_schema

_CONFIRM = " List the details and get the user's explicit confirmation (yes) before calling it."
_RESERVATION_ID = string("The reservation id, such as 'ZFA04Y'.")
_USER_ID = string("The user id, such as 'sara_doe_496'.")
_CABIN = string("The cabin class.", enum=["basic_economy", "economy", "business"])
_DATE = string("The date, 'YYYY-MM-DD', such as '2024-05-01'.")
_AIRPORT = "three-letter airport code, such as 'JFK'."
_FLIGHTS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"flight_number": string("Flight number, such as 'HAT001'."), "date": _DATE},
        "required": ["flight_number", "date"],
    },
}
_PASSENGERS = {
    "type": "array",
    "description": "Each passenger's first name, last name and date of birth ('YYYY-MM-DD').",
    "items": {
        "type": "object",
        "properties": {
            "first_name": string("First name."),
            "last_name": string("Last name."),
            "dob": string("Date of birth, 'YYYY-MM-DD'."),
        },
        "required": ["first_name", "last_name", "dob"],
    },
}
_PAYMENT_ID = string(
    "A payment method id from the user's profile, such as 'credit_card_7815826' or 'gift_card_7815826'."
)

SCHEMAS: list[dict[str, Any]] = [
    function_schema(
        "book_reservation",
        "Book a reservation." + _CONFIRM,
        {
            "user_id": _USER_ID,
            "origin": string("Origin " + _AIRPORT),
            "destination": string("Destination " + _AIRPORT),
            "flight_type": string("One way or round trip.", enum=["one_way", "round_trip"]),
            "cabin": _CABIN,
            "flights": {**_FLIGHTS, "description": "Every flight segment of the trip."},
            "passengers": _PASSENGERS,
            "payment_methods": {
                "type": "array",
                "description": "How the total is paid; the amounts must add up to the total price.",
                "items": {
                    "type": "object",
                    "properties": {"payment_id": _PAYMENT_ID, "amount": integer("Amount in dollars.")},
                    "required": ["payment_id", "amount"],
                },
            },
            "total_baggages": integer("Total number of checked bags."),
            "nonfree_baggages": integer("Number of checked bags that are paid for."),
            "insurance": string("Whether travel insurance is bought.", enum=["yes", "no"]),
        },
    ),
    CALCULATE_SCHEMA,
    function_schema(
        "cancel_reservation",
        "Cancel a whole reservation; its payments are refunded." + _CONFIRM,
        {"reservation_id": _RESERVATION_ID},
    ),
    function_schema(
        "get_reservation_details", "Get the details of a reservation.", {"reservation_id": _RESERVATION_ID}
    ),
    function_schema("get_user_details", "Get a user's details, including their reservations.", {"user_id": _USER_ID}),
    function_schema("list_all_airports", "List every airport the airline serves, with its city.", {}),
    function_schema(
        "search_direct_flight",
        "Search direct flights between two airports on a date.",
        {"origin": string("Origin " + _AIRPORT), "destination": string("Destination " + _AIRPORT), "date": _DATE},
    ),
    function_schema(
        "search_onestop_flight",
        "Search one-stop flights (pairs of flights) between two airports on a date.",
        {"origin": string("Origin " + _AIRPORT), "destination": string("Destination " + _AIRPORT), "date": _DATE},
    ),
    function_schema(
        "send_certificate",
        "Send a travel certificate to a user. Be careful!",
        {"user_id": _USER_ID, "amount": integer("Amount in dollars.")},
    ),
    TRANSFER_SCHEMA,
    function_schema(
        "update_reservation_baggages",
        "Change the checked bags of a reservation." + _CONFIRM,
        {
            "reservation_id": _RESERVATION_ID,
            "total_baggages": integer("The new total number of checked bags."),
            "nonfree_baggages": integer("The new number of paid checked bags."),
            "payment_id": _PAYMENT_ID,
        },
    ),
    function_schema(
        "update_reservation_flights",
        "Change the flights or cabin of a reservation." + _CONFIRM,
        {
            "reservation_id": _RESERVATION_ID,
            "cabin": _CABIN,
            "flights": {
                **_FLIGHTS,
                "description": "Every segment of the WHOLE new reservation, unchanged segments included.",
            },
            "payment_id": _PAYMENT_ID,
        },
    ),
    function_schema(
        "update_reservation_passengers",
        "Change the passengers of a reservation (same number of passengers)." + _CONFIRM,
        {"reservation_id": _RESERVATION_ID, "passengers": _PASSENGERS},
    ),
    function_schema(
        "get_flight_status",
        "Get the status of a flight on a date.",
        {"flight_number": string("The flight number, such as 'HAT001'."), "date": _DATE},
    ),
]
