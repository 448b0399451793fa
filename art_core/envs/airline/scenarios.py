"""Airline customer scenarios (a `Task` each) generated from the database and a seed: what each customer wants
and what must happen.

Each kind of task picks a customer and a situation, writes the customer's private instruction, and
gets the gold actions by running the write tools on a scratch copy of the database (a task whose
writes fail is not kept). Refusal kinds (the policy forbids the request) have no gold actions, and
information kinds have only outputs (a price the agent must state).

    >>> from art_core.envs.airline.db import make_db
    >>> splits = make_tasks(make_db(0), seed=0)
    >>> [len(splits[s]) for s in ("train", "val", "test")]
    [520, 100, 100]
"""

from __future__ import annotations

import copy
import random
from typing import Any, Callable

from art_core.envs.airline import tools
from art_core.envs.airline.db import AIRPORTS, CABINS, INSURANCE_PRICE, MONTH, TODAY, BAG_PRICE, Database, free_bags
from art_core.envs.customer_service.domain import Action, Task
from art_core.envs.tool_use.tools import ToolError

SPLIT_SIZES = {"train": 520, "val": 100, "test": 100}
PERSONAS = [
    "You are polite and patient.",
    "You are in a hurry and keep answers short.",
    "You are friendly and chatty.",
    "You are a little anxious and like to double-check details.",
    "You are direct and businesslike.",
    "You are easily confused by jargon and ask for plain words.",
]
CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business class"}
FUTURE = [d for d in MONTH if d > TODAY]


def _fork(db: Database, user_id: str, reservation_ids: set[str], flight_numbers: set[str]) -> Database:
    """A copy that is safe to write for these records: only the parts a write can touch are deep-copied."""
    reservations = dict(db["reservations"])
    for rid in reservation_ids & set(reservations):
        reservations[rid] = copy.deepcopy(reservations[rid])
        flight_numbers = flight_numbers | {s["flight_number"] for s in reservations[rid]["flights"]}
    flights = dict(db["flights"])
    for n in flight_numbers & set(flights):
        flights[n] = copy.deepcopy(flights[n])
    users = dict(db["users"])
    users[user_id] = copy.deepcopy(users[user_id])
    return {**db, "counters": dict(db["counters"]), "users": users, "reservations": reservations, "flights": flights}


def _run(db: Database, user_id: str, actions: list[Action]) -> list[Any] | None:
    """Results of the actions on a scratch copy, or None if one is refused (then the task is dropped)."""
    rids = {a.kwargs["reservation_id"] for a in actions if "reservation_id" in a.kwargs}
    flights = {leg["flight_number"] for a in actions for leg in a.kwargs.get("flights", [])}
    scratch = _fork(db, user_id, rids, flights)
    try:
        return [tools.TOOLS[a.name](scratch, **copy.deepcopy(a.kwargs)) for a in actions]
    except ToolError:
        return None


class _Pick:
    """Random choices about one database, shared by the task kinds."""

    def __init__(self, db: Database, rng: random.Random):
        self.db, self.rng = db, rng
        self.users = sorted(db["users"])
        self.reservations = sorted(db["reservations"])

    def user(self) -> dict[str, Any]:
        return self.db["users"][self.rng.choice(self.users)]

    def reservation(self, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        for _ in range(30):
            res = self.db["reservations"][self.rng.choice(self.reservations)]
            if res["status"] == "active" and ok(res):
                return res
        return None

    def status(self, seg: dict[str, Any]) -> str:
        return self.db["flights"][seg["flight_number"]]["dates"][seg["date"]]["status"]

    def payment(self, user: dict[str, Any], amount: int, certificates: bool = False) -> list[tuple[str, int]]:
        """[(payment id, amount)] that covers `amount`: a gift card or certificate with a card for the rest."""
        methods = user["payment_methods"]
        cards = sorted(m for m, v in methods.items() if v["source"] == "credit_card")
        gift = sorted(m for m, v in methods.items() if v["source"] == "gift_card" and v["amount"] >= amount)
        certs = sorted(m for m, v in methods.items() if v["source"] == "certificate" and 0 < v["amount"] < amount)
        if certificates and certs and self.rng.random() < 0.6:
            c = certs[0]
            return [(c, methods[c]["amount"]), (self.rng.choice(cards), amount - methods[c]["amount"])]
        if gift and self.rng.random() < 0.5:
            return [(self.rng.choice(gift), amount)]
        return [(self.rng.choice(cards), amount)]

    def describe(self, user: dict[str, Any], payment_id: str) -> str:
        m = user["payment_methods"][payment_id]
        if m["source"] == "credit_card":
            return f"your {m['brand']} credit card ending in {m['last_four']} ({payment_id})"
        return f"your {m['source'].replace('_', ' ')} {payment_id}"

    def passengers(self, user: dict[str, Any]) -> list[dict[str, str]]:
        me = dict(user["name"], dob=user["dob"])
        saved = user["saved_passengers"]
        return [me] + self.rng.sample(saved, self.rng.randint(0, min(2, len(saved))))


def _people_text(people: list[dict[str, str]]) -> str:
    others = [f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in people[1:]]
    return "just yourself" if not others else "yourself and " + " and ".join(others)


def _place(code: str) -> str:
    return f"{AIRPORTS[code]} ({code})"


def _task(
    pick: _Pick,
    user: dict[str, Any],
    kind: str,
    request: str,
    goal: str,
    known: dict[str, Any],
    actions: list[Action],
    outputs: list[str] | None = None,
) -> Task:
    name = f"{user['name']['first_name']} {user['name']['last_name']}"
    instruction = f"You are {name}, user id {user['user_id']}. {goal} {pick.rng.choice(PERSONAS)}"
    return Task(
        id=kind,
        user_id=user["user_id"],
        request=request,
        instruction=instruction,
        known_info={"user_id": user["user_id"], **{k: str(v) for k, v in known.items()}},
        actions=actions,
        outputs=outputs or [],
    )


# ---- bookings ----------------------------------------------------------------------------------


def _book(pick: _Pick, kind: str) -> Task | None:
    rng, db = pick.rng, pick.db
    user = pick.user()
    people = pick.passengers(user)
    n = len(people)
    cabin = rng.choice(CABINS)
    out_day = rng.choice(FUTURE[:-3])
    if kind == "book_onestop":
        origin, destination = rng.sample(sorted(AIRPORTS), 2)
        pairs = tools.search_onestop_flight(db, origin, destination, out_day)
        if not pairs:
            return None
        legs = [(o["flight_number"], out_day, o) for o in rng.choice(pairs)]
        trip = "one_way"
    else:
        offers = [f for f in db["flights"].values() if f["dates"][out_day]["status"] == "available"]
        first = rng.choice(offers)
        origin, destination = first["origin"], first["destination"]
        legs = [(first["flight_number"], out_day, tools.flight_offer(first, out_day))]
        trip = "one_way"
        if kind == "book_round_trip":
            back_day = rng.choice([d for d in FUTURE if d > out_day])
            back = tools.search_direct_flight(db, destination, origin, back_day)
            if not back:
                return None
            offer = rng.choice(back)
            legs.append((offer["flight_number"], back_day, offer))
            trip = "round_trip"
    bags = rng.randint(0, n + 1)
    nonfree = max(0, bags - free_bags(user["membership"], cabin, n))
    insurance = rng.choice(("yes", "no"))
    total = (
        sum(o["prices"][cabin] for _, _, o in legs) * n
        + BAG_PRICE * nonfree
        + (INSURANCE_PRICE * n if insurance == "yes" else 0)
    )
    payments = pick.payment(user, total, certificates=True)
    when = " and ".join(
        f"flight {o['flight_number']} on {d} departing at {o['departure'][:5]} ({_place(o['origin'])} to {_place(o['destination'])})"
        for _, d, o in legs
    )
    pay_text = " and the rest with ".join(pick.describe(user, p) for p, _ in payments)
    ask_total = rng.random() < 0.3
    goal = (
        f"You want to book a {trip.replace('_', ' ')} trip from {_place(origin)} to {_place(destination)} in "
        f"{CABIN_WORDS[cabin]} for {_people_text(people)}. You want {when}. You will check {bags} bag(s) in total. "
        f"You {'want' if insurance == 'yes' else 'do not want'} travel insurance. You pay with {pay_text}."
        + (" Before you agree, ask for the total price." if ask_total else "")
    )
    action = Action(
        name="book_reservation",
        kwargs={
            "user_id": user["user_id"],
            "origin": origin,
            "destination": destination,
            "flight_type": trip,
            "cabin": cabin,
            "flights": [{"flight_number": f, "date": d} for f, d, _ in legs],
            "passengers": people,
            "payment_methods": [{"payment_id": p, "amount": a} for p, a in payments],
            "total_baggages": bags,
            "nonfree_baggages": nonfree,
            "insurance": insurance,
        },
    )
    known = {
        "origin": origin,
        "destination": destination,
        "trip_type": trip,
        "cabin": cabin,
        "flights": "; ".join(f"{f} on {d} at {o['departure'][:5]}" for f, d, o in legs),
        "passengers": _people_text(people),
        "total_baggages": bags,
        "insurance": insurance,
        "payment_method": ", ".join(p for p, _ in payments),
    }
    request = (
        f"Hi, I'd like to book a {trip.replace('_', ' ')} flight from {AIRPORTS[origin]} to {AIRPORTS[destination]}."
    )
    return _task(pick, user, kind, request, goal, known, [action], [str(total)] if ask_total else [])


# ---- changes to a reservation ------------------------------------------------------------------


def _future(pick: _Pick, res: dict[str, Any]) -> bool:
    return all(s["date"] > TODAY and pick.status(s) == "available" for s in res["flights"])


def _change(pick: _Pick, kind: str) -> Task | None:
    rng, db = pick.rng, pick.db
    basic = kind == "refuse_change_basic"
    res = pick.reservation(lambda r: _future(pick, r) and (r["cabin"] == "basic_economy") == basic)
    if res is None:
        return None
    user = db["users"][res["user_id"]]
    legs = [dict(flight_number=s["flight_number"], date=s["date"]) for s in res["flights"]]
    moved = legs if res["flight_type"] == "one_way" else [l for l in legs if l["date"] == legs[-1]["date"]]
    earliest = FUTURE[0] if res["flight_type"] == "one_way" else max(l["date"] for l in legs if l not in moved)
    new_day = rng.choice([d for d in FUTURE if d != moved[0]["date"] and d >= earliest] or [None])
    if new_day is None:
        return None
    for l in moved:
        l["date"] = new_day
    part = "trip" if res["flight_type"] == "one_way" else "return flight"
    scratch = _fork(db, user["user_id"], {res["reservation_id"]}, {l["flight_number"] for l in legs})
    try:
        card = next(m for m, v in sorted(user["payment_methods"].items()) if v["source"] == "credit_card")
        diff_res = tools.update_reservation_flights(scratch, res["reservation_id"], res["cabin"], legs, card)
    except ToolError:
        return None
    diff = sum(s["price"] for s in diff_res["flights"]) * len(res["passengers"]) - sum(
        s["price"] for s in res["flights"]
    ) * len(res["passengers"])
    payment = pick.payment(user, max(diff, 0))[0][0]
    known = {"reservation_id": res["reservation_id"], "new_date": new_day, "payment_method": payment}
    goal = (
        f"Your reservation {res['reservation_id']} is {CABIN_WORDS[res['cabin']]}. You want to move your {part} to "
        f"{new_day}, same flights and cabin. Any fare difference goes to {pick.describe(user, payment)}."
    )
    if basic:
        goal += " If the agent says this is not allowed, accept it and end the conversation without asking for anything else."
        return _task(pick, user, kind, f"I need to change the date of my {part}.", goal, known, [])
    ask = diff > 0 and rng.random() < 0.5
    goal += " Before you agree, ask how much you will have to pay." if ask else ""
    action = Action(
        name="update_reservation_flights",
        kwargs={"reservation_id": res["reservation_id"], "cabin": res["cabin"], "flights": legs, "payment_id": payment},
    )
    return _task(
        pick, user, kind, f"I need to change the date of my {part}.", goal, known, [action], [str(diff)] if ask else []
    )


def _change_cabin(pick: _Pick, kind: str) -> Task | None:
    res = pick.reservation(lambda r: _future(pick, r))
    if res is None:
        return None
    user = pick.db["users"][res["user_id"]]
    cabin = pick.rng.choice([c for c in CABINS if c != res["cabin"]])
    legs = [dict(flight_number=s["flight_number"], date=s["date"]) for s in res["flights"]]
    now = sum(pick.db["flights"][l["flight_number"]]["dates"][l["date"]]["prices"][CABINS.index(cabin)] for l in legs)
    diff = (now - sum(s["price"] for s in res["flights"])) * len(res["passengers"])
    payment = pick.payment(user, max(diff, 0))[0][0]
    goal = (
        f"You want to move every flight of reservation {res['reservation_id']} from {CABIN_WORDS[res['cabin']]} to "
        f"{CABIN_WORDS[cabin]}. Any fare difference goes to {pick.describe(user, payment)}."
    )
    known = {"reservation_id": res["reservation_id"], "new_cabin": cabin, "payment_method": payment}
    action = Action(
        name="update_reservation_flights",
        kwargs={"reservation_id": res["reservation_id"], "cabin": cabin, "flights": legs, "payment_id": payment},
    )
    return _task(pick, user, kind, f"Can I switch my reservation to {CABIN_WORDS[cabin]}?", goal, known, [action])


def _add_bags(pick: _Pick, kind: str) -> Task | None:
    res = pick.reservation(lambda r: _future(pick, r))
    if res is None:
        return None
    user = pick.db["users"][res["user_id"]]
    extra = pick.rng.randint(1, 2)
    total = res["total_baggages"] + extra
    allowance = free_bags(user["membership"], res["cabin"], len(res["passengers"]))
    nonfree = max(res["nonfree_baggages"], total - allowance)
    fee = (nonfree - res["nonfree_baggages"]) * BAG_PRICE
    payment = pick.payment(user, fee)[0][0]
    ask = fee > 0 and pick.rng.random() < 0.5
    goal = (
        f"You want to add {extra} checked bag(s) to reservation {res['reservation_id']}, which has {res['total_baggages']} now. "
        f"Pay any fee with {pick.describe(user, payment)}."
        + (" Ask what the bags will cost before you agree." if ask else "")
    )
    known = {"reservation_id": res["reservation_id"], "extra_bags": extra, "payment_method": payment}
    action = Action(
        name="update_reservation_baggages",
        kwargs={
            "reservation_id": res["reservation_id"],
            "total_baggages": total,
            "nonfree_baggages": nonfree,
            "payment_id": payment,
        },
    )
    return _task(
        pick,
        user,
        kind,
        "I'd like to add some checked bags to my trip.",
        goal,
        known,
        [action],
        [str(fee)] if ask else [],
    )


def _passengers(pick: _Pick, kind: str) -> Task | None:
    res = pick.reservation(lambda r: _future(pick, r))
    if res is None:
        return None
    user = pick.db["users"][res["user_id"]]
    people = [dict(p) for p in res["passengers"]]
    i = pick.rng.randrange(len(people))
    old = f"{people[i]['first_name']} {people[i]['last_name']}"
    if pick.rng.random() < 0.5:
        people[i]["dob"] = people[i]["dob"][:8] + f"{int(people[i]['dob'][8:]) % 28 + 1:02d}"
        fix = f"the date of birth of {old} is wrong: it should be {people[i]['dob']}"
    else:
        people[i]["last_name"] = people[i]["last_name"] + "-" + pick.rng.choice(("Reyes", "Holm", "Ward", "Adler"))
        fix = f"{old}'s last name should be {people[i]['last_name']}"
    goal = f"On reservation {res['reservation_id']}, {fix}. Everything else about the passengers stays as it is."
    known = {"reservation_id": res["reservation_id"], "correction": fix}
    action = Action(
        name="update_reservation_passengers", kwargs={"reservation_id": res["reservation_id"], "passengers": people}
    )
    return _task(pick, user, kind, "I need to correct a passenger's details on my booking.", goal, known, [action])


# ---- cancellations, compensation, quotes -------------------------------------------------------


def _may_cancel(pick: _Pick, res: dict[str, Any]) -> bool:
    recent = res["created_at"] >= f"{MONTH[MONTH.index(TODAY) - 1]}{pick.db['now'][10:]}"
    airline_cancelled = any(pick.status(s) == "cancelled" for s in res["flights"])
    return recent or airline_cancelled or res["cabin"] == "business" or res["insurance"] == "yes"


def _cancel(pick: _Pick, kind: str) -> Task | None:
    allowed = kind == "cancel"
    if kind == "refuse_cancel_departed":
        res = pick.reservation(lambda r: any(pick.status(s) == "landed" for s in r["flights"]))
    else:
        res = pick.reservation(
            lambda r: all(s["date"] > TODAY for s in r["flights"]) and _may_cancel(pick, r) == allowed
        )
    if res is None:
        return None
    user = pick.db["users"][res["user_id"]]
    reason = pick.rng.choice(("your plans changed", "you are ill", "a family event moved", "work got in the way"))
    goal = f"You want to cancel reservation {res['reservation_id']} because {reason}."
    if not allowed:
        goal += " If the agent says it cannot be cancelled, accept that and end the conversation."
    known = {"reservation_id": res["reservation_id"], "reason": reason}
    actions = [Action(name="cancel_reservation", kwargs={"reservation_id": res["reservation_id"]})] if allowed else []
    return _task(pick, user, kind, "I want to cancel a reservation.", goal, known, actions)


def _compensation(pick: _Pick, kind: str) -> Task | None:
    def disrupted(r: dict[str, Any]) -> bool:
        return any(pick.status(s) in ("cancelled", "delayed") for s in r["flights"])

    def eligible(r: dict[str, Any]) -> bool:
        tier = pick.db["users"][r["user_id"]]["membership"]
        return tier != "regular" or r["insurance"] == "yes" or r["cabin"] == "business"

    allowed = kind == "compensation"
    res = pick.reservation(lambda r: disrupted(r) and eligible(r) == allowed)
    if res is None:
        return None
    user = pick.db["users"][res["user_id"]]
    seg = next(s for s in res["flights"] if pick.status(s) in ("cancelled", "delayed"))
    cancelled = any(pick.status(s) == "cancelled" for s in res["flights"])
    goal = (
        f"Flight {seg['flight_number']} on {seg['date']} of your reservation {res['reservation_id']} is {pick.status(seg)}. "
        "You are unhappy about it and ask for compensation."
    )
    if not allowed:
        goal += " If the agent says you are not eligible, accept that and end the conversation."
    known = {"reservation_id": res["reservation_id"], "flight": f"{seg['flight_number']} on {seg['date']}"}
    amount = (100 if cancelled else 50) * len(res["passengers"])
    actions = (
        [Action(name="send_certificate", kwargs={"user_id": user["user_id"], "amount": amount})] if allowed else []
    )
    return _task(
        pick,
        user,
        kind,
        f"My flight {seg['flight_number']} was {pick.status(seg)} and I'm not happy.",
        goal,
        known,
        actions,
    )


def _quote(pick: _Pick, kind: str) -> Task | None:
    user, day = pick.user(), pick.rng.choice(FUTURE)
    offers = [f for f in pick.db["flights"].values() if f["dates"][day]["status"] == "available"]
    flight, cabin = pick.rng.choice(offers), pick.rng.choice(CABINS)
    price = tools.flight_offer(flight, day)["prices"][cabin]
    goal = (
        f"You only want to know the {CABIN_WORDS[cabin]} fare of the direct flight from {_place(flight['origin'])} to "
        f"{_place(flight['destination'])} on {day} departing at {flight['departure'][:5]}. You do not want to book anything now."
    )
    known = {
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": day,
        "cabin": cabin,
        "departure_time": flight["departure"][:5],
    }
    return _task(
        pick,
        user,
        kind,
        f"How much is a flight from {AIRPORTS[flight['origin']]} to {AIRPORTS[flight['destination']]}?",
        goal,
        known,
        [],
        [str(price)],
    )


# kind -> (maker, how many of the 720 tasks); the refusal kinds start with "refuse_"
PLAN: dict[str, tuple[Callable[[_Pick, str], Task | None], int]] = {
    "book_direct": (_book, 100),
    "book_round_trip": (_book, 50),
    "book_onestop": (_book, 50),
    "change_date": (_change, 70),
    "change_cabin": (_change_cabin, 60),
    "add_bags": (_add_bags, 70),
    "update_passengers": (_passengers, 50),
    "cancel": (_cancel, 60),
    "compensation": (_compensation, 30),
    "refuse_change_basic": (_change, 40),
    "refuse_cancel": (_cancel, 45),
    "refuse_compensation": (_compensation, 20),
    "refuse_cancel_departed": (_cancel, 25),
    "quote_price": (_quote, 30),
}


def make_tasks(db: Database, seed: int = 0) -> dict[str, list[Task]]:
    """Tasks for every split; the same database and seed always give the same tasks.

    A kind whose situations run out (few delayed flights, say) gives fewer tasks than planned, and
    direct bookings make up the difference. Task ids read `{split}-{index}-{kind}`.
    """
    rng = random.Random(f"airline-tasks-{seed}")
    pick = _Pick(db, rng)
    tasks: list[Task] = []
    seen: set[str] = set()
    for kind, (maker, count) in list(PLAN.items()) + [("book_direct", (_book, 0))]:
        want = count if count else sum(SPLIT_SIZES.values()) - len(tasks)
        made = misses = 0
        while made < want and misses < 200:  # a kind with few situations gives up after 200 misses in a row
            task = maker(pick, kind)
            key = task.model_dump_json(exclude={"instruction"}) if task else ""
            if task is None or key in seen or (task.actions and _run(db, task.user_id, task.actions) is None):
                misses += 1
                continue
            seen.add(key)
            tasks.append(task)
            made, misses = made + 1, 0
    if len(tasks) < sum(SPLIT_SIZES.values()):
        raise RuntimeError(f"could only make {len(tasks)} airline tasks from this database; give make_db more users")
    rng.shuffle(tasks)
    out: dict[str, list[Task]] = {}
    start = 0
    for split, size in SPLIT_SIZES.items():
        out[split] = [
            t.model_copy(update={"id": f"{split}-{i:04d}-{t.id}"}) for i, t in enumerate(tasks[start : start + size])
        ]
        start += size
    return out
