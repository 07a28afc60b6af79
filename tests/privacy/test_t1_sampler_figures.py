"""T1 at the scales docs/reliability.md names (0.3 and 10) on the secure source the portal uses,
printing the p-values for docs/guarantees.md (tests/mechanisms/test_noise.py covers scales 0.5, 2
and 20, the discrete Gaussian, continuous noise and the exponential mechanism, on both sources).
Chi-square against the exact pmf, 10^5 draws: p > 1e-6 at the true scale, p < 1e-6 at 0.7x
and 1.3x (the twins)."""

import pytest

from mechanisms.noise import secure_source
from tests.mechanisms.stats_helpers import (
    DRAWS,
    P_ACCEPT,
    chi_square_p,
    discrete_laplace_pmf,
)


@pytest.mark.parametrize("scale", [0.3, 10.0])
def test_secure_discrete_laplace_fits_its_pmf_and_rejects_wrong_scales(scale):
    draws = secure_source().discrete_laplace(scale, DRAWS)
    width = int(60 * scale) + 60
    p = {
        factor: chi_square_p(draws, lambda k, f=factor: discrete_laplace_pmf(scale * f, k), width)
        for factor in (1.0, 0.7, 1.3)
    }
    print(
        f"\nFIGURE T1 secure discrete Laplace scale {scale:g}, n={DRAWS}: p={p[1.0]:.3g} "
        f"(need > {P_ACCEPT:g}); twins x0.7 p={p[0.7]:.3g}, x1.3 p={p[1.3]:.3g} (need < "
        f"{P_ACCEPT:g})"
    )
    assert p[1.0] > P_ACCEPT and p[0.7] < P_ACCEPT and p[1.3] < P_ACCEPT
