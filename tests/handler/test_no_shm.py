"""The engine without /dev/shm (handler/engine/no_shm.py), pinned against vLLM's code: the
names the plugin replaces exist where it replaces them, and vLLM loads general plugins in its
engine core before it makes the executor."""

import inspect
import multiprocessing
import threading
from pathlib import Path

import pytest

from vllm_sagemaker.core.shm import shm_usable
from vllm_sagemaker.handler.engine import no_shm


def test_vllm_s_in_process_executor_takes_its_lock_where_the_plugin_replaces_it() -> None:
    from vllm.v1.engine import core
    from vllm.v1.executor import uniproc_executor

    assert getattr(uniproc_executor, no_shm.LOCK_NAME) is multiprocessing.Lock
    assert uniproc_executor.__name__ == no_shm.EXECUTOR_MODULE
    assert "shared_worker_lock=Lock()" in inspect.getsource(uniproc_executor.UniProcExecutor)
    init = inspect.getsource(core.EngineCore.__init__)
    assert init.index("load_general_plugins()") < init.index("executor_class(")


def test_the_package_registers_the_plugin() -> None:
    from importlib.metadata import entry_points

    plugins = {entry.name: entry.value for entry in entry_points(group="vllm.general_plugins")}
    assert plugins["vllm_sagemaker_no_shm"] == "vllm_sagemaker.handler.engine.no_shm:register"


@pytest.mark.parametrize(("usable", "lock"), [(True, multiprocessing.Lock), (False, None)])
def test_without_dev_shm_the_executor_gets_a_thread_lock(
    usable: bool, lock: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from vllm.v1.executor import uniproc_executor

    monkeypatch.setattr(uniproc_executor, no_shm.LOCK_NAME, multiprocessing.Lock)
    monkeypatch.setattr(no_shm, "shm_usable", lambda: usable)
    no_shm.register()
    taken = getattr(uniproc_executor, no_shm.LOCK_NAME)
    assert taken is (lock or threading.Lock)


def test_dev_shm_is_usable_when_it_is_a_folder_this_process_may_write(tmp_path: Path) -> None:
    assert shm_usable(str(tmp_path))
    assert not shm_usable(str(tmp_path / "none"))
