"""Keras 3 front end: SG-MCMC optimizers, Γ in `fit`, sample collection, ensembles, priors.

The user's line: ``model.fit(x, y, callbacks=[SampleCollector()])``.
"""

from tfp_adaptive.keras import distribute
from tfp_adaptive.keras import health
from tfp_adaptive.keras import likelihoods
from tfp_adaptive.keras import optimizers
from tfp_adaptive.keras import priors
from tfp_adaptive.keras import schedules
from tfp_adaptive.keras.chains import Chains
from tfp_adaptive.keras.collector import SampleCollector
from tfp_adaptive.keras.curvature_calibration import CurvatureCalibration
from tfp_adaptive.keras.ensemble import BayesianEnsemble
from tfp_adaptive.keras.monitor import SamplerMonitor
from tfp_adaptive.keras.regression import GaussianNLL
from tfp_adaptive.keras.regression import NoiseScale
from tfp_adaptive.keras.sample_files import SampleFileError
from tfp_adaptive.keras.step_size_calibration import StepSizeCalibration
from tfp_adaptive.keras.gamma_train_step import enable_gamma
from tfp_adaptive.keras.gamma_train_step import gradients_and_gamma
from tfp_adaptive.keras.gamma_train_step import halves
from tfp_adaptive.keras.loop_check import check_loop

__all__ = ['BayesianEnsemble', 'Chains', 'CurvatureCalibration', 'GaussianNLL', 'NoiseScale', 'SampleCollector',
           'SampleFileError',
           'SamplerMonitor', 'StepSizeCalibration',
           'check_loop', 'distribute', 'enable_gamma', 'health', 'gradients_and_gamma', 'halves', 'likelihoods', 'optimizers', 'priors',
           'schedules']
