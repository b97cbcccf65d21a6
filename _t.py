import time, sys
sys.path.insert(0, "tests")
import conftest
t=time.time()
import test_loss_scale as T
import tempfile
print("import", time.time()-t); t=time.time()
T.test_tpu_estimator_skips_an_overflow_on_any_replica_and_writes_loss_scale(tempfile.mkdtemp())
print("first", time.time()-t); t=time.time()
T.test_tpu_estimator_skips_an_overflow_on_any_replica_and_writes_loss_scale(tempfile.mkdtemp())
print("second", time.time()-t)
