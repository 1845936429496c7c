"""One player's rating period as Glickman's papers state it, an oracle for
stream_app/engine/glicko.py (which rates a match as one period of every
participant against all the others, on the papers' internal scale).

Written from the papers alone, in their own terms, and sharing nothing with the
engine: Glicko-1 on the rating scale with q = ln 10 / 400 ("The Glicko system",
1995, Step 2), Glicko-2 on its internal scale ("Example of the Glicko-2 system",
2013, Steps 2 to 8). `games`: (opponent rating, opponent deviation, score) per
game, the score 1 for a win, 0.5 for a draw, 0 for a loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Games = Sequence[tuple[float, float, float]]

Q = math.log(10.0) / 400.0  # Glicko-1
GLICKO2_SCALE = 173.7178  # Glicko-2's conversion constant, as printed


def glicko_period(rating: float, deviation: float, games: Games) -> tuple[float, float]:
    """Glicko-1's Step 2 (`deviation` is the RD after Step 1): (r', RD').

        g(RD) = 1 / sqrt(1 + 3 q^2 RD^2 / pi^2)
        E_j   = 1 / (1 + 10^(-g(RD_j) (r - r_j) / 400))
        d^2   = 1 / (q^2 sum_j g(RD_j)^2 E_j (1 - E_j))
        r'    = r + q / (1/RD^2 + 1/d^2) sum_j g(RD_j) (s_j - E_j)
        RD'   = sqrt(1 / (1/RD^2 + 1/d^2))

    No games: 1/d^2 is 0, and r and RD stay as they are."""
    inv_d2 = 0.0  # 1 / d^2
    gain = 0.0  # sum_j g(RD_j) (s_j - E_j)
    for r_j, rd_j, s in games:
        g = 1.0 / math.sqrt(1.0 + 3.0 * Q * Q * rd_j * rd_j / (math.pi * math.pi))
        e = 1.0 / (1.0 + 10.0 ** (-g * (rating - r_j) / 400.0))
        inv_d2 += Q * Q * g * g * e * (1.0 - e)
        gain += g * (s - e)
    precision = 1.0 / (deviation * deviation) + inv_d2
    return rating + Q / precision * gain, math.sqrt(1.0 / precision)


def glicko2_period(rating: float, deviation: float, volatility: float, games: Games,
                   tau: float = 0.5, epsilon: float = 1e-6) -> tuple[float, float, float]:
    """Glicko-2's Steps 2 to 8: (r', RD', sigma'). No games: Step 6 alone, as for a
    player who did not compete (phi' = phi*, the rating and the volatility as they are)."""
    # Step 2: the internal scale.
    mu = (rating - 1500.0) / GLICKO2_SCALE
    phi = deviation / GLICKO2_SCALE
    if not games:
        return rating, GLICKO2_SCALE * math.sqrt(phi * phi + volatility * volatility), volatility
    # Steps 3 and 4: v, and Delta = v sum_j g(phi_j) (s_j - E_j).
    info = 0.0  # 1 / v
    gain = 0.0
    for r_j, rd_j, s in games:
        mu_j = (r_j - 1500.0) / GLICKO2_SCALE
        phi_j = rd_j / GLICKO2_SCALE
        g = 1.0 / math.sqrt(1.0 + 3.0 * phi_j * phi_j / (math.pi * math.pi))
        e = 1.0 / (1.0 + math.exp(-g * (mu - mu_j)))
        info += g * g * e * (1.0 - e)
        gain += g * (s - e)
    v = 1.0 / info
    delta = v * gain
    # Step 5: the new volatility, by the Illinois algorithm.
    a = math.log(volatility * volatility)

    def f(x: float) -> float:
        ex = math.exp(x)
        return (ex * (delta * delta - phi * phi - v - ex) / (2.0 * (phi * phi + v + ex) ** 2)
                - (x - a) / (tau * tau))

    big_a = a
    if delta * delta > phi * phi + v:
        big_b = math.log(delta * delta - phi * phi - v)
    else:
        k = 1
        while f(a - k * tau) < 0.0:
            k += 1
        big_b = a - k * tau
    f_a, f_b = f(big_a), f(big_b)
    while abs(big_b - big_a) > epsilon:
        big_c = big_a + (big_a - big_b) * f_a / (f_b - f_a)
        f_c = f(big_c)
        if f_c * f_b <= 0.0:
            big_a, f_a = big_b, f_b
        else:
            f_a /= 2.0
        big_b, f_b = big_c, f_c
    sigma = math.exp(big_a / 2.0)
    # Steps 6 to 8: phi*, the new phi and mu, back to the rating scale.
    phi_star2 = phi * phi + sigma * sigma
    phi_new = 1.0 / math.sqrt(1.0 / phi_star2 + 1.0 / v)
    mu_new = mu + phi_new * phi_new * gain
    return 1500.0 + GLICKO2_SCALE * mu_new, GLICKO2_SCALE * phi_new, sigma
