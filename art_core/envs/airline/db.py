"""The airline database, generated from a seed: airports, a month of flights, users, reservations.

Everything is plain JSON (dicts, lists, str, int) so the reward can hash it. Amounts are whole
dollars (ints), which keeps sums exact. The clock is frozen at `NOW`:

    >>> db = make_db(0)
    >>> db["now"], len(db["airports"])
    ('2025-06-12T15:00:00', 15)

Layout:
    now                 fixed "current" time of every conversation
    counters            next numbers for new reservation and certificate ids (deterministic ids)
    airports            code -> {"code", "city"}
    flights             flight_number -> {origin, destination, departure, arrival, dates}
                        dates: day -> {"status"} plus, while bookable ("available"),
                        {"seats": [n per cabin], "prices": [$ per cabin]} in CABINS order
                        (lists, not dicts: this is most of the database, and the reward hashes
                        and copies it once per episode)
    users               user_id -> profile, payment_methods, saved_passengers, membership, reservations
    reservations        reservation_id -> trip, cabin, flights (with the price paid), passengers,
                        payment_history, bags, insurance, created_at, status
"""

from __future__ import annotations

import datetime as dt
import random
import string
from typing import Any

Database = dict[str, Any]

NOW = "2025-06-12T15:00:00"
TODAY = NOW[:10]
MONTH = [f"2025-06-{d:02d}" for d in range(1, 31)]
CABINS = ("basic_economy", "economy", "business")
TIERS = ("regular", "silver", "gold")
INSURANCE_PRICE = 25  # dollars per passenger
BAG_PRICE = 40  # dollars per checked bag beyond the free allowance
MAX_PASSENGERS = 5
# free checked bags per passenger, by membership tier and cabin (mirrored in policy.md)
FREE_BAGS = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 1, "business": 2},
    "gold": {"basic_economy": 1, "economy": 2, "business": 3},
}

AIRPORTS = {
    "ATL": "Atlanta",
    "BOS": "Boston",
    "DEN": "Denver",
    "DFW": "Dallas",
    "DTW": "Detroit",
    "IAH": "Houston",
    "JFK": "New York",
    "LAS": "Las Vegas",
    "LAX": "Los Angeles",
    "MIA": "Miami",
    "MSP": "Minneapolis",
    "ORD": "Chicago",
    "PHX": "Phoenix",
    "SEA": "Seattle",
    "SFO": "San Francisco",
}
FIRST_NAMES = [
    "Ava",
    "Liam",
    "Noah",
    "Mia",
    "Omar",
    "Lena",
    "Ivan",
    "Sara",
    "Yuki",
    "Ravi",
    "Chloe",
    "Mateo",
    "Aisha",
    "Ethan",
    "Nora",
    "Hugo",
    "Priya",
    "Leo",
    "Zara",
    "Felix",
    "Ines",
    "Kofi",
    "Maya",
    "Theo",
    "Amara",
    "Jonas",
    "Elena",
    "Samir",
    "Grace",
    "Diego",
    "Hana",
    "Oscar",
    "Lucia",
    "Arjun",
    "Emma",
]
LAST_NAMES = [
    "Garcia",
    "Nguyen",
    "Smith",
    "Kowalski",
    "Okafor",
    "Rossi",
    "Tanaka",
    "Patel",
    "Muller",
    "Silva",
    "Johnson",
    "Haddad",
    "Larsen",
    "Moreau",
    "Kim",
    "Novak",
    "Costa",
    "Brown",
    "Ivanova",
    "Lopez",
    "Sato",
    "Fischer",
    "Mensah",
    "Dubois",
    "Khan",
    "Jensen",
    "Walker",
    "Romero",
    "Chen",
    "Ahmed",
]
CARD_BRANDS = ("visa", "mastercard", "amex")


def day_offset(day: str, days: int) -> str:
    """The date `days` after `day` (both YYYY-MM-DD)."""
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def minutes_of(hms: str) -> int:
    h, m, _ = hms.split(":")
    return int(h) * 60 + int(m)


def _routes(rng: random.Random) -> list[tuple[str, str]]:
    """A connected set of undirected routes: a shuffled ring plus random chords (22 in all)."""
    codes = sorted(AIRPORTS)
    rng.shuffle(codes)
    edges = {tuple(sorted((codes[i], codes[(i + 1) % len(codes)]))) for i in range(len(codes))}
    while len(edges) < 22:
        a, b = rng.sample(codes, 2)
        edges.add(tuple(sorted((a, b))))
    return sorted(edges)  # type: ignore[return-value]


def _base_prices(rng: random.Random, hours: int) -> dict[str, int]:
    economy = rng.randint(60, 110) + 40 * hours
    return {"basic_economy": int(economy * 0.6), "economy": economy, "business": int(economy * rng.uniform(2.2, 3.2))}


def _date_entry(rng: random.Random, day: str, base: dict[str, int]) -> dict[str, Any]:
    """The state of one flight on one day, as seen at NOW."""
    if day < TODAY:
        return {"status": "cancelled" if rng.random() < 0.15 else "landed"}
    if day == TODAY:  # today is a bad day: most flights are late or cancelled
        return {"status": rng.choice(["on time", "delayed", "delayed", "cancelled"])}
    if rng.random() < 0.04:
        return {"status": "cancelled"}
    seats = [rng.randint(0, 12), rng.randint(2, 20), rng.randint(0, 8)]
    prices = [int(base[c] * rng.uniform(0.85, 1.3)) for c in CABINS]
    return {"status": "available", "seats": seats, "prices": prices}


def _flights(rng: random.Random) -> dict[str, dict[str, Any]]:
    flights: dict[str, dict[str, Any]] = {}
    number = 100
    for a, b in _routes(rng):
        hours = rng.randint(1, 5)
        for origin, destination in ((a, b), (b, a)):
            # one or two departures per direction; spread through the day so connections exist
            for dep_min in sorted(rng.sample(range(6 * 60, 17 * 60, 35), rng.choice((1, 1, 2)))):
                number += rng.randint(1, 9)
                duration = hours * 60 + rng.choice((0, 15, 30, 45))
                base = _base_prices(rng, hours)
                flights[f"AX{number}"] = {
                    "flight_number": f"AX{number}",
                    "origin": origin,
                    "destination": destination,
                    "departure": hhmm(dep_min),
                    "arrival": hhmm(dep_min + duration),
                    "dates": {day: _date_entry(rng, day, base) for day in MONTH},
                }
    return flights


def free_bags(tier: str, cabin: str, passengers: int) -> int:
    """Free checked bags for a reservation: the per-passenger allowance times the passenger count."""
    return FREE_BAGS[tier][cabin] * passengers


def _person(rng: random.Random) -> dict[str, str]:
    dob = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 55))
    return {"first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES), "dob": dob.isoformat()}


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _user(rng: random.Random, taken: set[str]) -> dict[str, Any]:
    me = _person(rng)
    while True:
        user_id = f"{me['first_name'].lower()}_{me['last_name'].lower()}_{_digits(rng, 4)}"
        if user_id not in taken:
            break
    methods: dict[str, dict[str, Any]] = {}
    for _ in range(rng.randint(1, 2)):
        methods[f"credit_card_{_digits(rng, 7)}"] = {
            "source": "credit_card",
            "brand": rng.choice(CARD_BRANDS),
            "last_four": _digits(rng, 4),
        }
    for _ in range(rng.choice((0, 0, 1, 2))):
        methods[f"gift_card_{_digits(rng, 7)}"] = {"source": "gift_card", "amount": rng.randint(5, 60) * 10}
    if rng.random() < 0.3:
        methods[f"certificate_{_digits(rng, 7)}"] = {
            "source": "certificate",
            "amount": rng.choice((100, 150, 250, 500)),
        }
    return {
        "user_id": user_id,
        "name": {"first_name": me["first_name"], "last_name": me["last_name"]},
        "email": f"{user_id.replace('_', '.')}@example.com",
        "dob": me["dob"],
        "membership": rng.choices(TIERS, weights=(5, 3, 2))[0],
        "payment_methods": methods,
        "saved_passengers": [_person(rng) for _ in range(rng.randint(0, 3))],
        "reservations": [],
    }


def _itinerary(
    rng: random.Random, flights: dict[str, Any], by_route: dict[str, list[str]], day: str
) -> list[str] | None:
    """Flight numbers of a direct or one-stop trip starting at a random airport on `day`, or None."""
    first = rng.choice(sorted(flights))
    if rng.random() < 0.7:
        return [first]
    leg1 = flights[first]
    for nxt in by_route.get(leg1["destination"], []):
        leg2 = flights[nxt]
        if leg2["destination"] != leg1["origin"] and minutes_of(leg2["departure"]) >= minutes_of(leg1["arrival"]) + 60:
            return [first, nxt]
    return None


def _price_paid(rng: random.Random, flight: dict[str, Any], day: str, cabin: str) -> int:
    entry = flight["dates"][day]
    if "prices" in entry:
        return entry["prices"][CABINS.index(cabin)]
    economy = 60 + 30 * (minutes_of(flight["arrival"]) - minutes_of(flight["departure"])) // 45
    return {"basic_economy": int(economy * 0.6), "economy": economy, "business": economy * 3}[cabin]


def _reservation(
    rng: random.Random, user: dict[str, Any], flights: dict[str, Any], by_route: dict[str, list[str]]
) -> dict[str, Any] | None:
    # a quarter of the trips are under way or just over, so some meet delays and cancellations
    day = day_offset(TODAY, -rng.randint(0, 2)) if rng.random() < 0.35 else rng.choice(MONTH[3:-4])
    legs = _itinerary(rng, flights, by_route, day)
    if legs is None:
        return None
    trip = "round_trip" if rng.random() < 0.4 else "one_way"
    origin, destination = flights[legs[0]]["origin"], flights[legs[-1]]["destination"]
    segments = [(n, day) for n in legs]
    if trip == "round_trip":
        back_day = day_offset(day, rng.randint(1, 4))
        back = [n for n in by_route.get(destination, []) if flights[n]["destination"] == origin]
        if not back:
            return None
        segments.append((back[0], back_day))
    cabin = rng.choices(CABINS, weights=(3, 5, 2))[0]
    people = [dict(user["name"], dob=user["dob"])] + rng.sample(
        user["saved_passengers"], rng.randint(0, len(user["saved_passengers"]))
    )
    fares = [_price_paid(rng, flights[n], d, cabin) for n, d in segments]
    insurance = "yes" if rng.random() < 0.35 else "no"
    total_bags = rng.randint(0, 2 * len(people))
    nonfree = max(0, total_bags - free_bags(user["membership"], cabin, len(people)))
    total = (
        sum(fares) * len(people) + (INSURANCE_PRICE * len(people) if insurance == "yes" else 0) + BAG_PRICE * nonfree
    )
    cards = [m for m, v in user["payment_methods"].items() if v["source"] == "credit_card"]
    # created between 12 days and 3 hours before NOW; a few inside the last 24 hours
    hours_ago = rng.randint(3, 23) if rng.random() < 0.15 else rng.randint(25, 12 * 24)
    created = dt.datetime.fromisoformat(NOW) - dt.timedelta(hours=hours_ago)
    return {
        "user_id": user["user_id"],
        "origin": origin,
        "destination": destination,
        "flight_type": trip,
        "cabin": cabin,
        "flights": [
            {
                "flight_number": n,
                "date": d,
                "origin": flights[n]["origin"],
                "destination": flights[n]["destination"],
                "price": p,
            }
            for (n, d), p in zip(segments, fares)
        ],
        "passengers": people,
        "payment_history": [{"payment_id": rng.choice(cards), "amount": total}],
        "created_at": created.isoformat(),
        "total_baggages": total_bags,
        "nonfree_baggages": nonfree,
        "insurance": insurance,
        "status": "active",
    }


def make_db(seed: int = 0, n_users: int = 60) -> Database:
    """A fresh airline database; the same seed always gives the same database.

    >>> make_db(1) == make_db(1), make_db(1) == make_db(2)
    (True, False)
    """
    rng = random.Random(f"airline-db-{seed}")
    flights = _flights(rng)
    by_route: dict[str, list[str]] = {}
    for n, f in flights.items():
        by_route.setdefault(f["origin"], []).append(n)
    users: dict[str, Any] = {}
    for _ in range(n_users):
        u = _user(rng, set(users))
        users[u["user_id"]] = u
    reservations: dict[str, Any] = {}
    for user in users.values():
        for _ in range(rng.randint(1, 4)):
            r = _reservation(rng, user, flights, by_route)
            if r is None:
                continue
            while True:
                rid = "".join(rng.choice(string.ascii_uppercase[:25] + string.digits) for _ in range(6))
                if rid not in reservations:
                    break
            r = {"reservation_id": rid, **r}
            reservations[rid] = r
            user["reservations"].append(rid)
    return {
        "now": NOW,
        "counters": {"reservation": 1, "certificate": 1},
        "airports": {c: {"code": c, "city": city} for c, city in sorted(AIRPORTS.items())},
        "flights": flights,
        "users": users,
        "reservations": reservations,
    }
