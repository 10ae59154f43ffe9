"""How quantities read: one formatter for every view (numbers with SI prefixes, units always named).

``quantity(0.007457, "g", " CO2e")`` is ``7.457 mg CO2e``, never ``7.457e-06 kgCO2e``;
``money(0.0000123, "EUR")`` is ``0.0000123 EUR``.
"""

from __future__ import annotations

import math

#: SI prefixes from tera down to nano, with their factors.
_PREFIXES = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0), ("m", 1e-3), ("µ", 1e-6), ("n", 1e-9))


def quantity(value: float, unit: str, suffix: str = "", digits: int = 4) -> str:
    """``value`` (in ``unit``) with the SI prefix that puts it in [1, 1000), to ``digits`` significant digits.

    Args:
        value: The number, in ``unit`` (e.g. grams).
        unit: The base unit the prefix attaches to (``g``, ``J``, ``W``).
        suffix: Text after the unit (`` CO2e``).
        digits: Significant digits.

    Example: ``quantity(1234.0, "g", " CO2e")`` -> ``1.234 kg CO2e``.
    """
    if not math.isfinite(value):
        return f"{value} {unit}{suffix}"
    if value == 0:
        return f"0 {unit}{suffix}"
    size = abs(value)
    for prefix, factor in _PREFIXES:
        if size >= factor * 0.9995:
            return f"{value / factor:.{digits}g} {prefix}{unit}{suffix}"
    prefix, factor = _PREFIXES[-1]
    return f"{value / factor:.{digits}g} {prefix}{unit}{suffix}"


def carbon(grams: float) -> str:
    """Carbon in CO2-equivalent mass: ``12.3 g CO2e``, ``7.457 mg CO2e``, ``1.6 kg CO2e``."""
    return quantity(grams, "g", " CO2e")


def money(amount: float, currency: str) -> str:
    """An amount of money with its currency, in plain decimals with 3 significant digits below 1 (no exponent).

    Example: ``money(12.3456, "USD")`` -> ``12.35 USD``; ``money(0.0000123, "EUR")`` -> ``0.0000123 EUR``.
    """
    if not math.isfinite(amount) or amount == 0 or abs(amount) >= 1:
        return f"{amount:.2f} {currency}" if math.isfinite(amount) else f"{amount} {currency}"
    places = max(2, 2 - math.floor(math.log10(abs(amount))))
    return f"{amount:.{places}f}".rstrip("0").rstrip(".") + f" {currency}"
