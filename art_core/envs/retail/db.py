"""The retail database, generated from a seed: users, products with variants, orders in every status.

Everything is plain JSON (dicts, lists, strings, numbers) so `tau.domain.hash_db` can compare two
databases. The same seed gives the same database byte for byte; generation takes a few milliseconds.

    >>> db = make_db(0)
    >>> sorted(db)
    ['orders', 'products', 'users']
    >>> {o["status"] for o in db["orders"].values()} >= set(STATUSES)
    True

Layout (ids are strings):
    users[user_id]      = {user_id, name{first_name,last_name}, email, address{...}, payment_methods{id: {...}}, orders[]}
    products[product_id]= {product_id, name, variants{item_id: {item_id, options{}, available, price}}}
    orders[order_id]    = {order_id, user_id, address{...}, items[{name,product_id,item_id,price,options}],
                           status, fulfillments[{tracking_id[], item_ids[]}], payment_history[{transaction_type,
                           amount, payment_method_id}]} plus status-specific fields (cancel_reason, return_items, ...)
"""

from __future__ import annotations

import itertools
import random
from typing import Any

Database = dict[str, Any]

STATUSES = ("pending", "processed", "delivered", "cancelled", "return requested", "exchange requested")
_STATUS_WEIGHTS = (34, 14, 32, 8, 6, 6)
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

FIRST_NAMES = (
    "Ava Liam Noah Emma Olivia Mason Sofia Lucas Mia Ethan Isabel Yusuf Amara Chen Priya Mateo Hana Omar "
    "Lena Diego Fatima Kai Nora Ivan Zara Theo Maya Ravi Elena Jonas Aisha Felix Ines Tariq Clara Hugo"
).split()
LAST_NAMES = (
    "Lopez Nguyen Smith Kowalski Okafor Tanaka Garcia Muller Rossi Haddad Johansson Patel Kim Silva "
    "Novak Brown Ahmed Moreau Fischer Costa Ivanova Walker Sato Mendes Larsen Dubois Reyes Khan"
).split()
# (city, state, zip prefix): zips get two random digits appended, so name+zip is usually unique
CITIES = (
    ("Austin", "TX", "787"),
    ("Denver", "CO", "802"),
    ("Portland", "OR", "972"),
    ("Columbus", "OH", "432"),
    ("Raleigh", "NC", "276"),
    ("Madison", "WI", "537"),
    ("Phoenix", "AZ", "850"),
    ("Boise", "ID", "837"),
    ("Albany", "NY", "122"),
    ("Tampa", "FL", "336"),
    ("Omaha", "NE", "681"),
    ("Tucson", "AZ", "857"),
)
STREETS = "Oak Maple Cedar Pine Elm Birch Willow Lake Hill River Park Sunset Meadow Spring Forest".split()
STREET_KINDS = ("Street", "Avenue", "Lane", "Road", "Drive", "Court")
CARD_BRANDS = ("visa", "mastercard", "amex", "discover")

# product name -> (base price, {option: [values]}); variants are a seeded subset of the option grid
CATALOG: dict[str, tuple[float, dict[str, list[str]]]] = {
    "T-Shirt": (
        22.0,
        {
            "color": ["red", "blue", "black", "white"],
            "size": ["S", "M", "L", "XL"],
            "material": ["cotton", "polyester"],
        },
    ),
    "Water Bottle": (
        18.0,
        {
            "capacity": ["500ml", "750ml", "1000ml"],
            "material": ["steel", "glass", "plastic"],
            "color": ["green", "grey"],
        },
    ),
    "Backpack": (
        65.0,
        {
            "color": ["black", "navy", "olive"],
            "size": ["small", "medium", "large"],
            "compartment": ["laptop", "camera"],
        },
    ),
    "Headphones": (
        120.0,
        {"type": "over-ear on-ear in-ear".split(), "connectivity": ["wired", "wireless"], "color": ["black", "white"]},
    ),
    "Coffee Maker": (90.0, {"capacity": ["4 cups", "8 cups", "12 cups"], "type": ["drip", "espresso", "pour-over"]}),
    "Running Shoes": (
        95.0,
        {"size": ["7", "8", "9", "10", "11"], "color": ["black", "white", "red"], "sole": ["foam", "rubber"]},
    ),
    "Desk Lamp": (
        40.0,
        {
            "color": ["black", "white", "silver"],
            "brightness": ["low", "medium", "high"],
            "power": ["USB", "AC adapter"],
        },
    ),
    "Yoga Mat": (
        30.0,
        {"thickness": ["4mm", "6mm", "8mm"], "material": ["PVC", "rubber", "TPE"], "color": ["purple", "blue"]},
    ),
    "Laptop": (
        950.0,
        {"screen": ["13-inch", "15-inch"], "processor": ["i5", "i7", "i9"], "ram": ["8GB", "16GB", "32GB"]},
    ),
    "Smart Watch": (
        240.0,
        {"color": ["black", "silver", "gold"], "band": ["silicone", "leather", "metal"], "display": ["LCD", "AMOLED"]},
    ),
    "Bookshelf": (
        130.0,
        {
            "material": ["oak", "pine", "metal"],
            "color": ["brown", "white", "black"],
            "height": ["3 ft", "5 ft", "6 ft"],
        },
    ),
    "Electric Kettle": (
        45.0,
        {"capacity": ["1L", "1.5L", "2L"], "material": ["steel", "glass"], "color": ["black", "white", "silver"]},
    ),
    "Sunglasses": (
        80.0,
        {"frame": ["black", "brown", "silver"], "lens": ["grey", "green", "blue"], "polarized": ["yes", "no"]},
    ),
    "Umbrella": (
        25.0,
        {"size": ["compact", "full"], "color": ["black", "red", "blue"], "pattern": ["solid", "striped"]},
    ),
    "Wall Clock": (
        35.0,
        {
            "diameter": ["10 inches", "12 inches", "14 inches"],
            "color": ["black", "white", "wood"],
            "type": ["analog", "digital"],
        },
    ),
    "Mechanical Keyboard": (
        110.0,
        {
            "switch": ["linear", "tactile", "clicky"],
            "layout": ["full", "TKL", "60%"],
            "backlight": ["none", "white", "RGB"],
        },
    ),
    "Hiking Boots": (
        140.0,
        {"size": ["7", "8", "9", "10", "11", "12"], "material": ["leather", "synthetic"], "waterproof": ["yes", "no"]},
    ),
    "Blender": (
        70.0,
        {"capacity": ["1L", "1.5L", "2L"], "power": ["500W", "800W", "1200W"], "color": ["black", "red"]},
    ),
    "Office Chair": (
        210.0,
        {
            "material": ["mesh", "leather", "fabric"],
            "color": ["black", "grey", "blue"],
            "armrest": ["fixed", "adjustable"],
        },
    ),
    "Tablet": (
        380.0,
        {
            "screen": ["8-inch", "10-inch", "12-inch"],
            "storage": ["64GB", "128GB", "256GB"],
            "color": ["black", "silver"],
        },
    ),
}


def _address(rng: random.Random) -> dict[str, str]:
    city, state, zip_prefix = rng.choice(CITIES)
    return {
        "address1": f"{rng.randint(10, 9999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
        "address2": rng.choice(["", f"Suite {rng.randint(100, 999)}", f"Apt {rng.randint(1, 99)}"]),
        "city": city,
        "state": state,
        "country": "USA",
        "zip": f"{zip_prefix}{rng.randint(10, 99)}",
    }


def _unique(rng: random.Random, taken: set[str], make) -> str:
    while True:
        value = make(rng)
        if value not in taken:
            taken.add(value)
            return value


def _products(rng: random.Random, ids: set[str]) -> dict[str, dict[str, Any]]:
    products = {}
    for name, (base, options) in CATALOG.items():
        product_id = _unique(rng, ids, lambda r: str(r.randint(10**9, 10**10 - 1)))
        grid = list(itertools.product(*options.values()))
        chosen = rng.sample(grid, min(len(grid), rng.randint(6, 12)))
        variants = {}
        for combo in sorted(chosen):
            item_id = _unique(rng, ids, lambda r: str(r.randint(10**9, 10**10 - 1)))
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(options, combo)),
                "available": rng.random() < 0.8,
                "price": round(base * rng.uniform(0.8, 1.3), 2),
            }
        products[product_id] = {"product_id": product_id, "name": name, "variants": variants}
    return products


def _payment_methods(rng: random.Random, ids: set[str]) -> dict[str, dict[str, Any]]:
    methods: dict[str, dict[str, Any]] = {}
    sources = ["credit_card"] + rng.sample(["credit_card", "paypal", "gift_card", "gift_card"], rng.randint(0, 2))
    for source in sorted(set(sources)):  # at most one method per source keeps "my gift card" unambiguous
        pm_id = _unique(rng, ids, lambda r, source=source: f"{source}_{r.randint(10**6, 10**7 - 1)}")
        pm: dict[str, Any] = {"id": pm_id, "source": source}
        if source == "credit_card":
            pm |= {"brand": rng.choice(CARD_BRANDS), "last_four": f"{rng.randint(0, 9999):04d}"}
        elif source == "gift_card":
            pm["balance"] = float(rng.choice([0, 15, 40, 75, 120, 250, 600]) + rng.randint(0, 99))
        methods[pm_id] = pm
    return methods


def _items(rng: random.Random, products: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """1-4 distinct variants, each of a different product (so "the T-Shirt" names one line)."""
    items = []
    for product_id in rng.sample(sorted(products), rng.randint(1, 4)):
        product = products[product_id]
        item_id = rng.choice(sorted(product["variants"]))
        v = product["variants"][item_id]
        items.append(
            {
                "name": product["name"],
                "product_id": product_id,
                "item_id": item_id,
                "price": v["price"],
                "options": dict(v["options"]),
            }
        )
    return items


def _order(
    rng: random.Random, order_id: str, user: dict[str, Any], products: dict[str, dict[str, Any]], ids: set[str]
) -> dict[str, Any]:
    items = _items(rng, products)
    status = rng.choices(STATUSES, _STATUS_WEIGHTS)[0]
    total = round(sum(i["price"] for i in items), 2)
    # pay with a card or paypal; a gift card only when it could have covered the total
    payable = [pm for pm in user["payment_methods"].values() if pm["source"] != "gift_card" or pm["balance"] >= total]
    pm_id = rng.choice(sorted(pm["id"] for pm in payable))
    order: dict[str, Any] = {
        "order_id": order_id,
        "user_id": user["user_id"],
        "address": dict(user["address"]) if rng.random() < 0.85 else _address(rng),
        "items": items,
        "status": status,
        "fulfillments": [],
        "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": pm_id}],
    }
    if status not in ("pending", "cancelled"):
        tracking = _unique(rng, ids, lambda r: str(r.randint(10**11, 10**12 - 1)))
        order["fulfillments"] = [{"tracking_id": [tracking], "item_ids": [i["item_id"] for i in items]}]
    if status == "cancelled":
        order["cancel_reason"] = rng.choice(CANCEL_REASONS)
        order["payment_history"].append({"transaction_type": "refund", "amount": total, "payment_method_id": pm_id})
    elif status == "return requested":
        returned = rng.sample(items, rng.randint(1, len(items)))
        order["return_items"] = sorted(i["item_id"] for i in returned)
        order["return_payment_method_id"] = pm_id
    elif status == "exchange requested":
        line = rng.choice(items)
        others = sorted(set(products[line["product_id"]]["variants"]) - {line["item_id"]})
        new_id = rng.choice(others)
        order["exchange_items"] = [line["item_id"]]
        order["exchange_new_items"] = [new_id]
        order["exchange_payment_method_id"] = pm_id
        order["exchange_price_difference"] = round(
            products[line["product_id"]]["variants"][new_id]["price"] - line["price"], 2
        )
    return order


def make_db(seed: int = 0, n_users: int = 150, orders_per_user: tuple[int, int] = (1, 4)) -> Database:
    """A fresh retail database for `seed` (about 150 users, 375 orders, 20 products, 180 variants).

    >>> make_db(1) == make_db(1), make_db(1) == make_db(2)
    (True, False)
    """
    rng = random.Random(f"retail-db-{seed}")
    ids: set[str] = set()
    products = _products(rng, ids)
    users: dict[str, dict[str, Any]] = {}
    orders: dict[str, dict[str, Any]] = {}
    emails: set[str] = set()
    name_zips: set[tuple[str, str, str]] = set()
    while len(users) < n_users:
        first, last, address = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES), _address(rng)
        if (first, last, address["zip"]) in name_zips:
            continue  # find_user_id_by_name_zip must name exactly one user
        name_zips.add((first, last, address["zip"]))
        login, mail = f"{first}_{last}".lower(), f"{first}.{last}".lower()
        user_id = _unique(rng, ids, lambda r, login=login: f"{login}_{r.randint(1000, 9999)}")
        email = _unique(rng, emails, lambda r, mail=mail: f"{mail}{r.randint(10, 999)}@example.com")
        user = {
            "user_id": user_id,
            "name": {"first_name": first, "last_name": last},
            "email": email,
            "address": address,
            "payment_methods": _payment_methods(rng, ids),
            "orders": [],
        }
        for _ in range(rng.randint(*orders_per_user)):
            order_id = _unique(rng, ids, lambda r: f"#W{r.randint(10**6, 10**7 - 1)}")
            orders[order_id] = _order(rng, order_id, user, products, ids)
            user["orders"].append(order_id)
        users[user_id] = user
    return {"users": users, "products": products, "orders": orders}
