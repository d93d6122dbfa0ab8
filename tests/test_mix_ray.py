"""sources.Mix on the Ray CPU lane (the shared loopback cluster): the mixed stream, pixels too, is
the in-process lane's, with the per-source counts of the mixture delivered."""

from __future__ import annotations

from hybridload import HybridLoader, LoaderPolicy

from test_mix import REC, digest, mixture


def test_the_mixed_stream_on_ray_actors_is_the_in_process_stream_bit_for_bit(ray_cluster, photo_root):
    mix = mixture(photo_root)

    def run(policy):
        with HybridLoader(mix, REC, 6, seed=9, order="keyed", return_indices=True, device="cpu", policy=policy) as ld:
            out = []
            for e in (0, 1):
                ld.set_epoch(e)
                out += [digest(b) for b in ld]
            return out, ld.stats()

    local, _ = run(LoaderPolicy(cpu_actors=0, threads=2))
    remote, stats = run(LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=1))
    assert stats["lanes"]["ray"]["images"] == 90
    assert remote == local
    assert stats["sources"] == {"folder": 54, "extra": 36}
